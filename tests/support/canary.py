"""Canary settings of the live tests: small but real, 8 problems + 2 long prompts + 3 fingerprint texts per run
(~13 requests), so a run takes seconds on the CPU server."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_rocm_health.canary import fingerprint, problems
from vllm_rocm_health.canary.baseline import Baseline

CFG = dict(
    num_problems=8, max_requests=16, long_prompts=2, concurrency=4, max_tokens=8, timeout=60.0, idle_probe_after=0.0
)


def make_baseline(
    model: str = "m", seed: int = 1, num_problems: int = 2, long_prompts: int = 2, **kw: object
) -> Baseline:
    """A self-consistent baseline (right answers, score 1.0, one logprob list per reference text) that unit
    tests then break one field at a time."""
    todo = problems.generate(seed, num_problems)
    longs = problems.long_problems(seed, long_prompts)
    args: dict[str, object] = dict(
        model=model,
        seed=seed,
        num_problems=num_problems,
        max_tokens=8,
        answers=[p.answer for p in todo],
        score=1.0,
        long_prompts=long_prompts,
        long_answers=[p.answer for p in longs],
        fingerprints=[[None, -1.0, -2.0] for _ in fingerprint.REFERENCE_TEXTS],
    )
    args.update(kw)
    return Baseline(**args)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CanaryTiming:
    """Seconds, derived from the slowest of a few measured canary runs (`run`): the per-request timeout is several
    runs long (no healthy request comes near it), the interval several runs (the canary is idle most of the time),
    and `patience` is how long a test may wait for something that takes a few runs."""

    run: float
    timeout: float
    interval: float

    @property
    def patience(self) -> float:
        return 6 * (self.interval + self.timeout) + 60
