"""Fingerprint: prompt-token logprobs of fixed reference texts, compared with a baseline."""
from __future__ import annotations

import math

REFERENCE_TEXTS = [
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Water boils at 100 degrees Celsius at sea level, and freezes at 0 degrees Celsius.",
]


def drift(baseline: list[list[float | None]], current: list[list[float | None]]) -> float:
    """Max absolute per-token difference over all texts (nats). A different token count means a different
    tokenizer or model: infinite drift."""
    if len(baseline) != len(current):
        return math.inf
    worst = 0.0
    for base, cur in zip(baseline, current, strict=True):
        if len(base) != len(cur):
            return math.inf
        for b, c in zip(base, cur, strict=True):
            if b is None or c is None:
                if (b is None) != (c is None):
                    return math.inf
                continue
            worst = max(worst, abs(b - c))
    return worst
