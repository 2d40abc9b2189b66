"""`vllm-rocm qualify run` for real, against the vLLM CPU build (where every cudagraph mode is reset to
NONE). Three real servers and one that cannot start: NONE is the reference, FULL serves the same model (must
pass), PIECEWISE serves the perturbed model that answers wrong with HTTP 200 (must fail), FULL_DECODE_ONLY
names a model that does not exist (a row with vLLM's reason, not a crash). Small shapes keep it to minutes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_rocm_health.canary.baseline import Baseline
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.vllm_server import VLLM_PYTHON

from tests.support import tiers

pytestmark = pytest.mark.integration

GOOD = WORK / "models" / "smollm2-135m-instruct"
SMALL = ["--quick", "--startup-timeout", "600"]


def command(wrong: str, missing: str) -> str:
    """The model for the mode in $0: the perturbed copy for `wrong`, a missing directory for `missing`.
    `mode: 0` skips torch.compile (minutes on CPU; the CPU build resets cudagraph_mode to NONE anyway)."""
    script = (
        f'm="$1"; shift; case "$0" in {wrong}) m="$m-perturbed";; {missing}) m="$m-missing";; esac; '
        f'exec {VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model "$m" "$@"'
    )
    return (
        f"sh -c {shlex.quote(script)} {{mode}} {{model}} --served-model-name {{served_model_name}} "
        "--host 127.0.0.1 --port {port} --seed 0 --max-model-len 1024 --dtype bfloat16 "
        """--compilation-config '{"mode":0,"cudagraph_mode":"{mode}"}'"""
    )


@pytest.fixture(autouse=True)
@tiers.needs("integration", "runs `vllm-rocm qualify`, which starts vLLM CPU servers")
def _need_vllm() -> None:
    for need in (VLLM_PYTHON, GOOD / "config.json", GOOD.with_name(GOOD.name + "-perturbed") / "config.json"):
        if not need.exists():
            pytest.skip(f"{need} is missing: run `make setup-vllm` (make test does it)")


def stop_leftovers(workdir: Path) -> list[int]:
    """Kill the process group of any server qualify left (it should leave none); returns their ids."""
    left = []
    for pid_file in (workdir / "logs").glob("*.pid"):
        pgid = int(pid_file.read_text())
        try:
            os.killpg(pgid, signal.SIGKILL)
            left.append(pgid)
        except ProcessLookupError:
            pass
    return left


def start(workdir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_rocm_qualify",
            "run",
            "--workdir",
            str(workdir),
            "--model",
            str(GOOD),
            "--served-model-name",
            "smollm2-135m-instruct",
            "--env",
            "VLLM_CPU_KVCACHE_SPACE=1",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, workdir: Path, timeout: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # qualify stops its servers on SIGTERM
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
        stop_leftovers(workdir)
    return proc.returncode, out, err


@pytest.mark.timeout(3000)  # a safety net only: qualify's own --startup-timeout bounds each server
def test_qualify_on_the_cpu_server(tmp_path: Path) -> None:
    proc = start(
        tmp_path,
        "--modes",
        "NONE,FULL,PIECEWISE,FULL_DECODE_ONLY",
        "--command",
        command(wrong="PIECEWISE", missing="FULL_DECODE_ONLY"),
        "--require",
        "PIECEWISE",
        *SMALL,
    )
    rc, out, err = finish(proc, tmp_path, timeout=2900)
    assert list((tmp_path / "logs").glob("*.pid")) == [], "every server was stopped"
    assert rc == 1, f"--require PIECEWISE: the perturbed mode failed\n{err[-3000:]}"
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {r["mode"]: r for r in report["rows"]}
    assert list(rows) == ["NONE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"]

    ref = rows["NONE"]
    assert ref["role"] == "reference" and ref["verdict"] == "pass" and ref["canary"]["outcome"] == "pass"
    assert ref["vllm_version"] == report["vllm_version"] != ""
    assert ref["ready_s"] > 0 and set(ref["throughput"]) == {"1", "4"}

    good = rows["FULL"]
    assert good["verdict"] == "pass", good["verdict_reason"]
    assert good["requested_mode"] == "FULL" and good["effective_mode"] == "NONE" and good["downgraded"]
    assert all(a["ok"] and a["disagree"] == 0 for a in good["agreement"].values())
    assert sum(a["requests"] for a in good["agreement"].values()) == 1 + 3 + 4 + 5 + 1

    wrong = rows["PIECEWISE"]
    assert wrong["verdict"] == "fail" and wrong["status"] == "ok"
    assert sum(a["disagree"] for a in wrong["agreement"].values()) > 0
    assert wrong["canary"]["outcome"] == "fail"

    missing = rows["FULL_DECODE_ONLY"]
    assert missing["status"] == "start_failed" and missing["verdict"] == "error"
    assert "exited with code" in missing["reason"] and "missing" in missing["reason"], missing["reason"]

    assert report["recommended"] in ("NONE", "FULL")
    base = Baseline.load(tmp_path / "baseline.json")
    assert report["baseline"]["answers"] == base.answers and base.model == "smollm2-135m-instruct"
    assert "recommended: " + report["recommended"] in out and "PIECEWISE: fail:" in out
    for words in (
        "[1/4 NONE] ready in",
        "[3/4 PIECEWISE] verdict: fail",
        "[4/4 FULL_DECODE_ONLY] did not start",
        "required mode PIECEWISE did not pass",
    ):
        assert words in err

    # The report replays from its logs, and deployment refuses the wrong mode.
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_qualify",
            "replay",
            "--report",
            str(tmp_path / "report.json"),
            "--logs",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert replay.returncode == 0, replay.stderr
    gate = [
        sys.executable,
        "-m",
        "vllm_rocm_health",
        "qualification",
        "apply",
        "--report",
        str(tmp_path / "report.json"),
        "--out-dir",
        str(tmp_path / "gate"),
    ]
    assert subprocess.run(gate + ["--mode", "PIECEWISE"], capture_output=True, timeout=60).returncode == 1
    assert subprocess.run(gate, capture_output=True, timeout=60).returncode == 0
    assert (tmp_path / "gate" / "mode").read_text().strip() == report["recommended"]


@pytest.mark.timeout(600)
def test_ctrl_c_stops_the_server_it_started(tmp_path: Path) -> None:
    proc = start(tmp_path, "--modes", "NONE", "--command", command(wrong="X", missing="Y"), *SMALL)
    pid_file = tmp_path / "logs" / "NONE.pid"
    try:
        while not pid_file.exists() and proc.poll() is None:  # written as soon as the server is launched
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        pgid = int(pid_file.read_text())
        os.killpg(pgid, 0)  # the server runs
        proc.send_signal(signal.SIGINT)
    finally:
        rc, _, err = finish(proc, tmp_path, timeout=300)
    assert rc == 130, err[-2000:]
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert not pid_file.exists()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True
    assert report["rows"][0]["status"] == "interrupted" and report["rows"][0]["verdict"] == "error"
    assert "interrupted" in err
