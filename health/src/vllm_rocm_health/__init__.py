"""The health sidecar: CUDA-graph capture state and an accuracy canary for one vLLM server, as Prometheus metrics."""
