"""The H200 run's real logs (tests/fixtures/qualify/h200-vllm-0.26.0, see its README) through the sidecar's parser
and through `qualify replay`: CI meets real GPU capture logs without a GPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_rocm_health.state import LogState
from vllm_rocm_qualify.replay import replay

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0"
EXPECTED = {  # mode -> (effective mode, graphs, capture s, GiB), read off the logs by hand
    "NONE": ("NONE", {}, 0.0, 0.0),
    "PIECEWISE": ("PIECEWISE", {"unspecified/PIECEWISE": 35}, 2.0, 0.19),
    "FULL_DECODE_ONLY": ("FULL_DECODE_ONLY", {"unspecified/FULL": 19}, 1.0, 0.11),
    "FULL_AND_PIECEWISE": ("FULL_AND_PIECEWISE", {"unspecified/FULL": 19, "unspecified/PIECEWISE": 35}, 2.0, 0.27),
    "FULL": ("FULL", {"unspecified/FULL": 35}, 1.0, 0.13),
}


def parse(path: Path, requested: str = "") -> dict:
    state = LogState(requested_hint=requested)
    state.feed_block(path.read_bytes())
    return state.summary()


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_parser_reads_each_real_log(mode: str) -> None:
    s = parse(H200 / f"{mode}.log")
    effective, graphs, seconds, gib = EXPECTED[mode]
    assert s["vllm_version"] == "0.26.0"
    assert s["requested_mode"] == mode  # from `non-default args`, not from a hint
    assert s["effective_mode"] == effective and not s["downgraded"]
    assert s["graphs"] == graphs
    assert (s["capture_seconds"], s["capture_gib"]) == (seconds, gib)
    assert s["capture_finished"] is (mode != "NONE")
    assert s["engines_seen"] == 1 and s["restarts"] == 0
    # The logs run on past start-up into request serving and a clean shutdown: no failure anywhere.
    assert s["failures"] == []


def test_probe_logs_v1_runner_bars_have_phases() -> None:
    v1 = parse(H200 / "probe" / "full-v1-runner.log")
    assert v1["graphs"] == {"mixed/FULL": 35} and v1["effective_mode"] == "FULL"
    triton = parse(H200 / "probe" / "full-v2-triton.log")
    assert triton["graphs"] == {"unspecified/FULL": 35} and triton["capture_seconds"] == 7.0


def test_replay_rederives_the_report() -> None:
    again, diffs = replay(H200 / "report.json", H200)
    assert diffs == []
    rows = {r["mode"]: r for r in again["rows"]}
    assert {m: r["verdict"] for m, r in rows.items()} == {
        "NONE": "pass",
        "PIECEWISE": "pass",
        "FULL_DECODE_ONLY": "pass",
        "FULL_AND_PIECEWISE": "pass",
        "FULL": "fail",
    }
    assert again["recommended"] == "FULL_DECODE_ONLY"
    assert rows["FULL"]["canary"]["outcome"] == "fail"
    assert all(not a["ok"] for a in rows["FULL"]["agreement"].values())
    tok = {m: r["throughput"]["128"]["tok_s"] for m, r in rows.items()}
    assert tok["FULL"] > tok["FULL_DECODE_ONLY"] > tok["FULL_AND_PIECEWISE"] > tok["PIECEWISE"] > tok["NONE"]


def test_replay_notices_a_log_that_says_otherwise(tmp_path: Path) -> None:
    for f in H200.glob("*.log"):
        shutil.copy(f, tmp_path / f.name)
    # As if FULL had been downgraded: vLLM's warning before its capture.
    text = (tmp_path / "FULL.log").read_text()
    cut = text.index("Capturing CUDA graphs")
    warning = (
        "WARNING 12-03 02:22:10 [compilation.py:1400] CUDAGraphMode.FULL is not supported with "
        "FlashAttentionBackend backend (support: AttentionCGSupport.UNIFORM_BATCH); setting "
        "cudagraph_mode=FULL_AND_PIECEWISE\n"
    )
    (tmp_path / "FULL.log").write_text(text[:cut] + warning + text[cut:])
    report = json.loads((H200 / "report.json").read_text())
    for r in report["rows"]:
        r.pop("log_bytes")  # the edited log is longer: parse it whole
    (tmp_path / "report.json").write_text(json.dumps(report))
    _, diffs = replay(tmp_path / "report.json", tmp_path)
    assert any(d.startswith("FULL: downgraded is True in the log") for d in diffs), diffs
    (tmp_path / "NONE.log").unlink()
    _, diffs = replay(tmp_path / "report.json", tmp_path)
    assert any("NONE: log" in d and "missing" in d for d in diffs)


def test_replay_cli_exit_codes(tmp_path: Path) -> None:
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_qualify",
            "replay",
            "--report",
            str(H200 / "report.json"),
            "--logs",
            str(H200),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "recommended: FULL_DECODE_ONLY" in ok.stdout and "FULL: fail" in ok.stdout
    report = json.loads((H200 / "report.json").read_text())
    report["recommended"] = "FULL_AND_PIECEWISE"
    (tmp_path / "r.json").write_text(json.dumps(report))
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_qualify",
            "replay",
            "--report",
            str(tmp_path / "r.json"),
            "--logs",
            str(H200),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "recommended FULL_DECODE_ONLY now, FULL_AND_PIECEWISE in the report" in bad.stderr
