"""A small run of `make bench` (figures are not asserted: machines differ; only that it measures)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "vllm_rocm_stack.bench", "--lines", "20000", "--load-lines", "4000",
                          "--reps", "1", "--idle-seconds", "1", "--out", str(out)], capture_output=True, text=True,
                         timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    r = json.loads(out.read_text())
    assert r["parse"]["lines"] >= 20000 and r["parse"]["ratio"] > 0
    assert 0 < r["sidecar"]["detect_latency_s_median"] < 5
    assert len(r["sidecar"]["rss_after_slices_mib"]) == 8
    assert "ratio sidecar/grep" in res.stdout
