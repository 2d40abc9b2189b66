"""Small runs of `make bench` (figures are not asserted: machines differ; only that it measures and reports)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.canary import CanaryTiming
from tests.support.vllm_server import VllmServer

SMALL = ["--lines", "20000", "--load-lines", "4000", "--reps", "1", "--idle-seconds", "1"]


def bench(out: Path, *args: str, timeout: float = 180) -> tuple[dict, str]:
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack.bench", *SMALL, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(out.read_text()), res.stdout


def test_bench_smoke_without_vllm(tmp_path: Path) -> None:
    r, stdout = bench(tmp_path / "r.json", "--no-live")
    p = r["parse"]
    assert p["lines"] >= 20000 and p["ratio"] > 0 and p["find_ratio"] > 0
    assert 0 < r["sidecar"]["detect_latency_s_median"] < 5
    assert len(r["sidecar"]["rss_after_slices_mib"]) == 8
    assert "live" not in r
    assert "x grep (goal < 2x)" in stdout


@pytest.mark.integration
@pytest.mark.timeout(0)  # bounded by the subprocess timeout below, which follows the measured canary run
def test_bench_smoke_on_the_real_servers(
    tmp_path: Path, vllm_server: VllmServer, vllm_perturbed_server: VllmServer, canary_timing: CanaryTiming
) -> None:
    # The bench records two baselines and runs about a dozen canary runs besides its fixed windows: 300 s when a
    # run takes a few seconds, proportionally more on a busy machine (a run took 20 s on a loaded CI machine).
    limit = 300 + 30 * canary_timing.run
    r, stdout = bench(
        tmp_path / "r.json",
        "--vllm-url",
        vllm_server.base_url,
        "--bad-vllm-url",
        vllm_perturbed_server.base_url,
        "--window",
        "6",
        "--load-runs",
        "1",
        "--flip-interval",
        "3",
        "--flip-reps",
        "1",
        "--hours",
        "0.25",
        "--hours-interval",
        "1",
        timeout=limit,
    )
    load, flip, hours = r["live"]["load"], r["live"]["flip"], r["live"]["hours"]
    assert load["outcomes"] == ["pass"] and load["load_requests"] > 0 and load["load_errors"] == 0
    assert 0 < load["token_share"] < 1 and load["canary_requests_per_run"] <= 16  # max_requests bounds it
    assert len(flip["fail_latency_s"]) == 1 and flip["fail_latency_s"][0] > 0
    assert hours["canary_runs"] == 3 and hours["outcomes"]["pass"] >= 3 and len(hours["rss_mib"]) == 3
    assert "canary load, tokens (defaults)" in stdout and "wrong answers -> canary metric" in stdout


def test_bench_refuses_half_a_server_pair(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack.bench", "--vllm-url", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 2 and "both --vllm-url and --bad-vllm-url" in res.stderr
