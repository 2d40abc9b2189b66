"""`vllm-rocm qualify run` for real, against the vLLM CPU build (where every cudagraph mode is reset to NONE). Three
real servers and one that cannot start: NONE is the reference, FULL serves the same model (must pass), PIECEWISE
serves the perturbed model that answers wrong with HTTP 200 (must fail), FULL_DECODE_ONLY names a model that does not
exist (a row with vLLM's reason, not a crash). Run twice: side by side (the default) and one server at a time
(`--parallel 1`, without FULL); the two reports must say the same of the modes both ran, but for timings. Small
shapes keep each run to minutes."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_rocm_health.canary.baseline import Baseline
from vllm_rocm_qualify.client import Output
from vllm_rocm_qualify.compare import compare_one
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.vllm_server import VLLM_PYTHON, qualify_args

from tests.support import tiers
from tests.support.crowd import crowd

pytestmark = [pytest.mark.integration, pytest.mark.crowd]

GOOD = WORK / "models" / "smollm2-135m-instruct"
MODES = "NONE,FULL,PIECEWISE,FULL_DECODE_ONLY"
# Quick runs with a patient start. Every run gets the CPU build's settings from start() (vllm_server.qualify_args:
# one OpenMP thread per server, scheduled by the kernel, as qualify's --env), so that their answers are computed alike.
SMALL = ["--quick", "--startup-timeout", "600"]


def command(wrong: str, missing: str) -> str:
    """The model for the mode in $0: the perturbed copy for `wrong`, a missing directory for `missing`; the
    server's caches go first into its log. `mode: 0` skips torch.compile (minutes on CPU; the CPU build resets
    cudagraph_mode to NONE anyway)."""
    script = (
        'echo "caches: VLLM_CACHE_ROOT=$VLLM_CACHE_ROOT TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR"; '
        f'm="$1"; shift; case "$0" in {wrong}) m="$m-perturbed";; {missing}) m="$m-missing";; esac; '
        f'exec {VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model "$m" "$@"'
    )
    return (
        f"sh -c {shlex.quote(script)} {{mode}} {{model}} --served-model-name {{served_model_name}} "
        "--host 127.0.0.1 --port {port} --seed 0 --max-model-len 1024 --dtype bfloat16 "
        """--compilation-config '{"mode":0,"cudagraph_mode":"{mode}"}'"""
    )


@pytest.fixture(scope="module", autouse=True)
def _one_crowd(request: pytest.FixtureRequest) -> Iterator[None]:
    """Four servers side by side: not while the node tests run theirs (tests/support/crowd.py)."""
    with crowd("qualify's live runs", request.config):
        yield


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
            *qualify_args(),  # the CPU build's settings; its KV cache keeps four side by side on the machine
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


class Run:
    def __init__(self, workdir: Path, rc: int, out: str, err: str, seconds: float) -> None:
        self.workdir, self.rc, self.out, self.err, self.seconds = workdir, rc, out, err, seconds
        self.report: dict[str, Any] = json.loads((workdir / "report.json").read_text())

    def said(self, pattern: str) -> list[int]:
        """Line numbers of the progress lines matching `pattern`."""
        return [i for i, line in enumerate(self.err.splitlines()) if re.search(pattern, line)]


def qualify(workdir: Path, *args: str, modes: str = MODES) -> Run:
    t0 = time.monotonic()
    proc = start(
        workdir,
        "--modes",
        modes,
        "--command",
        command(wrong="PIECEWISE", missing="FULL_DECODE_ONLY"),
        "--require",
        "PIECEWISE",
        *SMALL,
        *args,
    )
    rc, out, err = finish(proc, workdir, timeout=1500)
    assert list((workdir / "logs").glob("*.pid")) == [], "every server was stopped"
    return Run(workdir, rc, out, err, time.monotonic() - t0)


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return qualify(tmp_path_factory.mktemp("side-by-side"))


# One at a time without FULL: on the CPU build it is NONE again (the same model, the same effective mode), and the
# side-by-side run already judges it; each server one at a time is a whole start, shapes, canary and throughput
# rounds in a row. The reference, a wrong mode and one that cannot start keep every kind of row.
SERIAL_MODES = "NONE,PIECEWISE,FULL_DECODE_ONLY"


@pytest.fixture(scope="module")
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory, side_by_side: Run) -> Run:
    return qualify(tmp_path_factory.mktemp("one-at-a-time"), "--parallel", "1", modes=SERIAL_MODES)


@pytest.mark.timeout(1800)  # a safety net only: qualify's own --startup-timeout bounds each server
def test_qualify_on_the_cpu_server(side_by_side: Run) -> None:
    run = side_by_side
    rc, out, err, tmp_path = run.rc, run.out, run.err, run.workdir
    assert rc == 1, f"--require PIECEWISE: the perturbed mode failed\n{err[-3000:]}"
    report = run.report
    rows = {r["mode"]: r for r in report["rows"]}
    assert list(rows) == ["NONE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"]

    ref = rows["NONE"]
    assert ref["role"] == "reference" and ref["verdict"] == "pass" and ref["canary"]["outcome"] == "pass"
    assert ref["vllm_version"] == report["vllm_version"] != ""
    assert ref["ready_s"] > 0 and set(ref["throughput"]) == {"1", "4"}
    assert all(len(level["rounds"]) == 2 for level in ref["throughput"].values())  # --quick: two rounds

    good = rows["FULL"]
    assert good["verdict"] == "pass", good["verdict_reason"]
    assert good["requested_mode"] == "FULL" and good["effective_mode"] == "NONE" and good["downgraded"]
    assert all(a["ok"] and a["disagree"] == 0 for a in good["agreement"].values())
    assert sum(a["requests"] for a in good["agreement"].values()) == 1 + 3 + 4 + 5 + 1

    wrong = rows["PIECEWISE"]
    assert wrong["verdict"] == "fail" and wrong["status"] == "ok"
    assert sum(a["disagree"] for a in wrong["agreement"].values()) > 0
    assert wrong["canary"]["outcome"] == "fail"
    assert all(len(level["rounds"]) == 1 for level in wrong["throughput"].values())  # wrong: one round only

    missing = rows["FULL_DECODE_ONLY"]
    assert missing["status"] == "start_failed" and missing["verdict"] == "error"
    assert "exited with code" in missing["reason"] and "missing" in missing["reason"], missing["reason"]
    assert "missing" in missing["log_tail"] and len(missing["log_tail"].splitlines()) <= 20

    assert report["recommended"] in ("NONE", "FULL")
    assert report["ranking"]["speeds"].keys() == {"NONE", "FULL"}
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
    # Side by side: every server started before the first was ready, each with its own compile cache, and the
    # status line said where each one was.
    assert max(run.said(r"\] starting: ")) < min(run.said(r"\] ready in "))
    assert run.said(r"^\S+ \d+ s, \d/4 ready: NONE .*; FULL_DECODE_ONLY "), err[-3000:]
    for label in ("NONE", "FULL", "PIECEWISE"):
        assert f"VLLM_CACHE_ROOT={tmp_path / 'cache' / label / 'vllm'}" in environ_of(tmp_path, label)
    # The throughput rounds interleave: NONE, FULL, PIECEWISE in round 1; FULL, NONE in round 2 (reversed, and
    # PIECEWISE, already wrong, is left out).
    order = [m for i in run.said(r"throughput round") for m in re.findall(r"\[\d/4 (\w+)\]", err.splitlines()[i])]
    assert order == ["NONE", "FULL", "PIECEWISE", "FULL", "NONE"], order

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


def environ_of(workdir: Path, label: str) -> str:
    """The caches the server ran with: the first line of its log, which command()'s shell writes before vLLM."""
    return (workdir / "logs" / f"{label}.log").read_text().splitlines()[0]


# What depends on timing: start-up and capture seconds, the port in the command line, the log's length and its last
# lines (timestamped), throughput (and so the ranking and the recommendation), and the clocks of report and baseline.
TIMING_ROW_KEYS = {"ready_s", "capture_s", "command", "log_bytes", "log_tail", "throughput"}
TIMING_REPORT_KEYS = {"created", "seconds", "settings", "rounds", "ranking", "recommended"}
# Shapes whose requests go one at a time: the same batches in every run, so the same answers to the last logprob. In
# the others (bursts, long prefills among decodes) when each request joins a batch depends on timing, and batch
# composition moves bf16 logits: there, two runs agree up to the ties the comparison itself allows.
ALONE = ("first", "single", "after_idle")


def comparable(report: dict[str, Any], modes: str) -> dict[str, Any]:
    rows = []
    for r in (r for r in report["rows"] if r["mode"] in modes.split(",")):
        row = {k: v for k, v in r.items() if k not in TIMING_ROW_KEYS}
        # The reason quotes each shape's drift; those of the batch-dependent shapes move (the ALONE shapes' drifts
        # and the canary's are compared below, exactly).
        row["verdict_reason"] = re.sub(r"drift \d+\.\d+", "drift D", row.get("verdict_reason", ""))
        # So does how many of a batch-dependent shape's answers a wrong mode gets wrong: near-ties flip with the
        # batches (measured under a CPU hog: mixed 3/5 one at a time, 4/5 side by side; both fail the shape).
        row["verdict_reason"] = re.sub(
            r"\b(\w+): \d+/(\d+) answers differ",
            lambda m: m[0] if m[1] in ALONE else f"{m[1]}: N/{m[2]} answers differ",
            row["verdict_reason"],
        )
        # Every canary run draws its fresh problems from a seed of its own, which its reason names.
        row["verdict_reason"] = re.sub(r"run seed \d+", "run seed S", row["verdict_reason"])
        if isinstance(row.get("canary"), dict) and "reason" in row["canary"]:
            row["canary"] = {**row["canary"], "reason": re.sub(r"run seed \d+", "run seed S", row["canary"]["reason"])}
        if "agreement" in row:
            row["agreement"] = {
                shape: a
                if shape in ALONE
                else {k: a[k] for k in ("requests", "ok", "error")} | {"any_disagree": a["disagree"] > 0}
                for shape, a in row["agreement"].items()
            }
        rows.append(row)
    baseline = {k: v for k, v in (report["baseline"] or {}).items() if k != "created"}
    return {**{k: v for k, v in report.items() if k not in TIMING_REPORT_KEYS}, "rows": rows, "baseline": baseline}


@pytest.mark.timeout(1800)
def test_one_at_a_time_says_the_same_but_for_timings(side_by_side: Run, one_at_a_time: Run) -> None:
    seq = one_at_a_time
    assert seq.rc == side_by_side.rc == 1, seq.err[-3000:]
    # One at a time: each server stopped before the next started.
    starts, stops = seq.said(r"\] starting: "), seq.said(r"\] stopped \(exit")
    assert len(starts) == len(stops) == 3 and all(stop < nxt for stop, nxt in zip(stops, starts[1:], strict=False))
    # The same verdicts, reasons, log facts, canary results and agreement for the modes both ran, but for timings.
    assert [r["mode"] for r in seq.report["rows"]] == SERIAL_MODES.split(",")
    assert comparable(seq.report, SERIAL_MODES) == comparable(side_by_side.report, SERIAL_MODES)
    # The same answers: identical where requests went alone, equal up to bf16 ties where they shared batches.
    tolerance = seq.report["settings"]["tolerance"]
    for label in ("NONE", "PIECEWISE"):
        a = json.loads((seq.workdir / "outputs" / f"{label}.json").read_text())
        b = json.loads((side_by_side.workdir / "outputs" / f"{label}.json").read_text())
        assert a.keys() == b.keys()
        for shape in a:
            if shape in ALONE:
                assert a[shape] == b[shape], f"{label} {shape}: the answers differ"
                continue
            results = [
                compare_one(Output.from_json(x), Output.from_json(y), tolerance)
                for x, y in zip(a[shape], b[shape], strict=True)
            ]
            assert all(r["kind"] in ("exact", "tie") and r["drift"] <= tolerance for r in results), (label, shape)
    print(f"side by side {side_by_side.seconds:.0f} s, one at a time {seq.seconds:.0f} s")


@pytest.mark.timeout(600)
def test_ctrl_c_stops_every_server_it_started(tmp_path: Path) -> None:
    proc = start(tmp_path, "--modes", "NONE,FULL", "--command", command(wrong="X", missing="Y"), *SMALL)
    pid_files = [tmp_path / "logs" / f"{label}.pid" for label in ("NONE", "FULL")]
    try:
        while not all(p.exists() for p in pid_files) and proc.poll() is None:  # written as each server launches
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        pgids = [int(p.read_text()) for p in pid_files]
        for pgid in pgids:
            os.killpg(pgid, 0)  # the servers run
        proc.send_signal(signal.SIGINT)
    finally:
        rc, _, err = finish(proc, tmp_path, timeout=300)
    assert rc == 130, err[-2000:]
    for pgid in pgids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
    assert not any(p.exists() for p in pid_files)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True
    assert [(r["mode"], r["status"], r["verdict"]) for r in report["rows"]] == [
        ("NONE", "interrupted", "error"),
        ("FULL", "interrupted", "error"),
    ]
    assert "interrupted" in err
