"""Canary settings of the live tests: small but real, 8 problems + 2 long prompts + 3 fingerprint texts per run
(~13 requests), so a run takes seconds on the CPU server."""
from __future__ import annotations

CFG = dict(num_problems=8, max_requests=16, long_prompts=2, concurrency=4, max_tokens=8, timeout=60.0,
           idle_probe_after=0.0)
