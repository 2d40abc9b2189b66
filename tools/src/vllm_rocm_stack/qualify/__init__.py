"""`vllm-rocm-stack qualify`: the fastest cudagraph mode that is also correct, measured on the node."""
