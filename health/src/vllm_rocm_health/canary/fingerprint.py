"""Fingerprint: prompt-token logprobs of fixed reference texts, compared with a baseline."""

from __future__ import annotations

import math

REFERENCE_TEXTS = [
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Water boils at 100 degrees Celsius at sea level, and freezes at 0 degrees Celsius.",
]


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def drift(baseline: list[list[float | None]], current: list[list[float | None]]) -> float:
    """Max absolute per-token difference over all texts (nats). Agreement has to be shown, never assumed: a
    different text or token count (another tokenizer or model), a null where the baseline has a number (or the
    reverse), or any NaN/infinite value is infinite drift. Only a null on both sides (the first token, which has
    no logprob) is skipped."""
    if len(baseline) != len(current) or not baseline:
        return math.inf
    worst = 0.0
    compared = 0
    for base, cur in zip(baseline, current, strict=True):
        if len(base) != len(cur):
            return math.inf
        for b, c in zip(base, cur, strict=True):
            if b is None and c is None:
                continue
            if not (_finite(b) and _finite(c)):
                return math.inf
            worst = max(worst, abs(b - c))  # type: ignore[operator]
            compared += 1
    return worst if compared else math.inf
