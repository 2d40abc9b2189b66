"""The canary baseline of the real vLLM CPU server, recorded once per session through the real CLI, and the
canary timings of the live tests, derived from what one canary run measurably takes on this machine now (a busy
2-core CI machine runs it several times slower than an idle one; no interval or timeout here is a constant)."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner

from tests.support.canary import CFG
from tests.support.vllm_server import VllmServer


@pytest.fixture(scope="session")
def baseline_file(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recorded through the real CLI, as an operator would."""
    out = tmp_path_factory.mktemp("baseline") / "baseline.json"
    r = subprocess.run([sys.executable, "-m", "vllm_rocm_health", "baseline", "record", "--out", str(out),
                        "--vllm-url", vllm_server.base_url, "--num-problems", str(CFG["num_problems"]),
                        "--notes", "smollm2 bf16 eager cpu"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


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


@pytest.fixture(scope="session")
def canary_timing(vllm_server: VllmServer, baseline_file: Path) -> CanaryTiming:
    runner = CanaryRunner(CanaryConfig(baseline=str(baseline_file), **CFG), vllm_server.base_url, CollectorRegistry())
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
