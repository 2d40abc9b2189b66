"""`vllm-rocm qualify`: the fastest cudagraph mode that is also correct, measured on the node. The report's format,
which the sidecar, the compose gate and the chart read, is `vllm_rocm_core.qualification`."""
