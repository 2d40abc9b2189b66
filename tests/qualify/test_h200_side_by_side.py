"""Three side-by-side qualify runs on a real H200 (tests/fixtures/qualify/h200-vllm-0.26.0-side-by-side): the same
verdicts every run, and with the default tie margin the same recommendation every run (issue 33: with one
throughput run per mode, and then with a 5% margin, it flipped between runs on the same node)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_rocm_qualify.ranking import DEFAULT_TIE_MARGIN, rank

RUNS = sorted(
    (Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0-side-by-side").glob("run*")
)


def report(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


def test_three_runs_were_recorded() -> None:
    assert len(RUNS) == 3


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_run_recommends_the_same_mode_with_the_default_margin(run: Path) -> None:
    r = report(run)
    assert rank(r["rows"], 0, DEFAULT_TIE_MARGIN)["recommended"] == "FULL_DECODE_ONLY"


def test_the_five_percent_margin_flipped() -> None:
    """What the recorded runs said with the old margin: not the same mode twice."""
    assert {rank(report(run)["rows"], 0, 0.05)["recommended"] for run in RUNS[:2]} == {
        "FULL_AND_PIECEWISE",
        "FULL_DECODE_ONLY",
    }


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_the_verdicts_hold_in_every_run(run: Path) -> None:
    verdicts = {row["mode"]: row["verdict"] for row in report(run)["rows"]}
    assert verdicts["FULL"] == "fail"
    assert all(verdicts[m] == "pass" for m in ("NONE", "PIECEWISE", "FULL_DECODE_ONLY"))
    assert verdicts["FULL_AND_PIECEWISE"] in ("pass", "error")  # run 3: two requests failed under 128 clients
