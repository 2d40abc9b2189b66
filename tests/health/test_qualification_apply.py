"""`vllm-rocm-health qualification apply`: compose's gate. It writes what deployment takes from a report, and
refuses (exit 1, nothing written) a mode the report did not pass, another model, or a malformed report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vllm_rocm_health.canary.baseline import Baseline

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"


def apply(out: Path, *args: str, report: Path = H200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "qualification",
            "apply",
            "--report",
            str(report),
            "--out-dir",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_writes_the_recommended_mode_a_vllm_config_and_the_baseline(tmp_path: Path) -> None:
    res = apply(tmp_path, "--served-model-name", "smollm2-135m-instruct")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "mode").read_text() == "FULL_DECODE_ONLY\n"
    cfg = yaml.safe_load((tmp_path / "vllm.yaml").read_text())
    assert json.loads(cfg["compilation-config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    base = Baseline.load(tmp_path / "baseline.json")
    assert base.model == "smollm2-135m-instruct" and base.answers == json.loads(H200.read_text())["baseline"]["answers"]


def test_a_chosen_mode_that_passed(tmp_path: Path) -> None:
    assert apply(tmp_path, "--mode", "piecewise").returncode == 0
    assert (tmp_path / "mode").read_text() == "PIECEWISE\n"


def test_refuses_a_failed_mode_and_leaves_nothing_behind(tmp_path: Path) -> None:
    assert apply(tmp_path).returncode == 0  # an earlier, good apply
    res = apply(tmp_path, "--mode", "FULL")
    assert res.returncode == 1 and "cudagraph_mode FULL failed qualification" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_refuses_another_model_and_a_broken_report(tmp_path: Path) -> None:
    res = apply(tmp_path / "a", "--served-model-name", "Qwen/Qwen3-0.6B")
    assert res.returncode == 1 and "qualified model 'smollm2-135m-instruct'" in res.stderr
    broken = tmp_path / "broken.json"
    broken.write_text(H200.read_text()[:500])
    res = apply(tmp_path / "b", report=broken)
    assert res.returncode == 1 and "unreadable" in res.stderr
    no_base = json.loads(H200.read_text())
    no_base["baseline"] = None
    (tmp_path / "nb.json").write_text(json.dumps(no_base))
    res = apply(tmp_path / "c", report=tmp_path / "nb.json")
    assert res.returncode == 1 and "no canary baseline" in res.stderr
    assert not any((tmp_path / d).exists() and any((tmp_path / d).iterdir()) for d in "abc")


@pytest.mark.parametrize(
    "change",
    [
        {"vllm_version": None},
        {"vllm_version": ""},
        {"served_model_name": None},
        {"rows": "dup"},  # the same mode twice: which verdict holds?
    ],
)
def test_refuses_a_report_that_does_not_say_what_it_qualified(tmp_path: Path, change: dict) -> None:
    raw = json.loads(H200.read_text())
    for key, value in change.items():
        if value is None:
            raw.pop(key)
        elif value == "dup":
            raw["rows"].append(dict(raw["rows"][-1]))
        else:
            raw[key] = value
    path = tmp_path / "r.json"
    path.write_text(json.dumps(raw))
    res = apply(tmp_path / "out", report=path)
    assert res.returncode == 1 and ("is missing" in res.stderr or "appears twice" in res.stderr), res.stderr
