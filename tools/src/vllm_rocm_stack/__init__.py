"""The local stack behind `make run`: a real vLLM (CPU build), the health sidecar, Prometheus with the alert rules."""
