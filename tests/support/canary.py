"""Canary settings of the live tests: small but real, 8 problems + 2 long prompts + 3 fingerprint texts per run
(~13 requests), so a run takes seconds on the CPU server."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner, fingerprint, problems
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


def record_baseline(url: str, out: Path) -> Path:
    """The baseline of the server at `url`, recorded through the real CLI into `out`, as an operator would."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "baseline",
            "record",
            "--out",
            str(out),
            "--vllm-url",
            url,
            "--num-problems",
            str(CFG["num_problems"]),
            "--notes",
            "smollm2 bf16 eager cpu",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return out


def measure_timing(url: str, baseline: Path) -> CanaryTiming:
    """The timings of the live tests, from the slowest of three canary runs against the server at `url` now."""
    runner = CanaryRunner(CanaryConfig(baseline=str(baseline), **CFG), url, CollectorRegistry())
    try:
        slowest = 0.0
        for _ in range(3):
            t0 = time.monotonic()
            result = runner.run_once()
            assert result.outcome == "pass", result.reason
            slowest = max(slowest, time.monotonic() - t0)
    finally:
        runner.close()
    timeout = max(5.0, 4 * slowest)
    return CanaryTiming(run=slowest, timeout=timeout, interval=max(3.0, 3 * slowest))
