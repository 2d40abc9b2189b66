"""A steady client load on a vLLM server, to measure the canary's share of what the server serves."""

from __future__ import annotations

import threading
import urllib.request

import httpx
from prometheus_client.parser import text_string_to_metric_families

# vLLM's own counters (V1 engine, 0.10 to 0.33): what the server served, whoever asked.
SERVED = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "completion_tokens": "vllm:generation_tokens_total",
    "requests": "vllm:request_success_total",
}

PROMPTS = [
    "Write one sentence about the sea.",
    "List three colours.",
    "Explain what a CPU does in a few words.",
    "Give a short greeting to a new colleague.",
    "Name a fruit and describe its taste.",
]


def served_counters(base_url: str) -> dict[str, float]:
    """The server's cumulative prompt/completion tokens and finished requests, from its /metrics."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=10) as r:
        text = r.read().decode()
    totals = dict.fromkeys(SERVED, 0.0)
    wanted = {v: k for k, v in SERVED.items()}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in wanted:
                totals[wanted[s.name]] += s.value
    return totals


class SteadyLoad:
    """`concurrency` clients, each sending the next completion as soon as the last one finished."""

    def __init__(self, base_url: str, model: str, concurrency: int = 4, max_tokens: int = 32) -> None:
        self.base_url, self.model, self.max_tokens = base_url, model, max_tokens
        self.concurrency = concurrency
        self.requests = self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(concurrency)]

    def _client(self, i: int) -> None:
        with httpx.Client(base_url=self.base_url, timeout=120) as http:
            n = 0
            while not self._stop.is_set():
                body = {
                    "model": self.model,
                    "prompt": PROMPTS[(i + n) % len(PROMPTS)],
                    "max_tokens": self.max_tokens,
                    "temperature": 0.7,
                    "seed": n,
                }
                try:
                    ok = http.post("/v1/completions", json=body).status_code == 200
                except httpx.HTTPError:
                    ok = False
                with self._lock:
                    self.requests += 1
                    self.errors += not ok
                n += 1

    def __enter__(self) -> SteadyLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(150)
