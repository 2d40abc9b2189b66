"""Decode throughput: output tokens per second at fixed prompt and output lengths, per client count."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .client import Client, RequestFailed


def _level(client: Client, prompt: list[int], tokens: int, clients: int, requests: int) -> dict[str, Any]:
    todo = iter(range(requests))
    served = [0, 0]  # completion tokens, failed requests
    lock = threading.Lock()

    def worker() -> None:
        for _ in todo:  # each client sends its next request as soon as the last one finished
            try:
                n, failed = client.fixed_length(prompt, tokens), 0
            except RequestFailed:
                n, failed = 0, 1
            with lock:
                served[0] += n
                served[1] += failed

    pool = ThreadPoolExecutor(clients)
    try:
        t0 = time.monotonic()
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
        seconds = time.monotonic() - t0
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    out: dict[str, Any] = {
        "requests": requests,
        "seconds": round(seconds, 3),
        "tok_s": round(served[0] / seconds, 1) if seconds > 0 else 0.0,
    }
    if served[1]:
        out["failed"] = served[1]
    if served[0] != (requests - served[1]) * tokens:
        out["short"] = (requests - served[1]) * tokens - served[0]
    return out


def measure(
    client: Client, prompt: list[int], levels: list[int], tokens: int, rounds: int, progress: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    client.fixed_length(prompt, tokens)  # warm-up, not counted
    out = {}
    for clients in levels:
        out[str(clients)] = r = _level(client, prompt, tokens, clients, max(4, rounds * clients))
        progress(
            f"throughput, {clients} clients: {r['tok_s']:,.0f} tok/s"
            + (f" ({r['failed']} requests failed)" if r.get("failed") else "")
        )
    return out
