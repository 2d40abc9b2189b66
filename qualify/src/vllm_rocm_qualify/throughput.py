"""Decode throughput: output tokens per second at fixed prompt and output lengths, per client count, in rounds (the
runner interleaves them across modes; ranking.py judges their spread)."""

from __future__ import annotations

import statistics
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
    client: Client,
    prompt: list[int],
    levels: list[int],
    tokens: int,
    per_client: int,
    progress: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """One throughput round of one mode: each client count in turn, after a warm-up request."""
    client.fixed_length(prompt, tokens)  # warm-up, not counted
    out = {}
    for clients in levels:
        out[str(clients)] = r = _level(client, prompt, tokens, clients, max(4, per_client * clients))
        if r.get("failed"):
            progress(f"throughput, {clients} clients: {r['failed']} requests failed")
    return out


def combine(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """A mode's rounds as its report entry: per client count the median tok/s, every round's tok/s, the requests
    of one round, and the failed or short requests of all rounds."""
    out: dict[str, dict[str, Any]] = {}
    for level in rounds[0] if rounds else {}:
        runs = [r[level] for r in rounds if level in r]
        tok = [x["tok_s"] for x in runs]
        entry: dict[str, Any] = {
            "requests": runs[0]["requests"],
            "seconds": round(sum(x["seconds"] for x in runs), 3),
            "tok_s": round(statistics.median(tok), 1),
            "rounds": tok,
        }
        for key in ("failed", "short"):
            if any(x.get(key) for x in runs):
                entry[key] = sum(x.get(key, 0) for x in runs)
        out[level] = entry
    return out
