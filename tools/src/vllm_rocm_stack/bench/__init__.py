"""`make bench`: what the sidecar and the canary cost, measured next to a baseline in the same run."""
