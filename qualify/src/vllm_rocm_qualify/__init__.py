"""`vllm-rocm qualify`: the fastest cudagraph mode that is also correct, measured on the node; and the report's
format (`qualification`), which the sidecar, the compose gate and the chart read."""
