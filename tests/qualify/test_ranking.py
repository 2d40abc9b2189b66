"""The recommendation over throughput rounds: a mode wins only beyond the spread of the rounds, otherwise the modes
tie and the fixed order decides. The numbers are the H200's (issue 33): two runs of one qualification on the same
node, model and release, one round per mode each, recommended FULL_DECODE_ONLY once and FULL_AND_PIECEWISE the next."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from vllm_rocm_qualify import report as rep
from vllm_rocm_qualify.config import DEFAULT_MODES
from vllm_rocm_qualify.ranking import TIE_ORDER, beats, rank, spread

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0"
LEVELS = ("1", "16", "128")
# tok/s at 1 / 16 / 128 clients. RUN_1: the committed report; RUN_2: the later run the issue quotes.
RUN_1 = {
    "NONE": (80, 1237, 7094),
    "PIECEWISE": (136, 1988, 13445),
    "FULL_DECODE_ONLY": (580, 7820, 22069),
    "FULL_AND_PIECEWISE": (415, 5168, 17778),
    "FULL": (628, 7930, 23046),
}
RUN_2 = {"FULL_DECODE_ONLY": (443, 4745, 16787), "FULL_AND_PIECEWISE": (478, 7079, 20159)}


def row(mode: str, *rounds: tuple[float, ...], verdict: str = "pass") -> dict:
    """A judged row whose throughput has one entry per round, as qualify writes it."""
    return {
        "mode": mode,
        "verdict": verdict,
        "throughput": {lvl: {"tok_s": rounds[0][i], "rounds": [r[i] for r in rounds]} for i, lvl in enumerate(LEVELS)},
    }


def test_one_round_each_recommends_whichever_run_it_was() -> None:
    """The flip the issue reports: each run alone is unambiguous, and they disagree."""
    first = rank([row(m, t, verdict="fail" if m == "FULL" else "pass") for m, t in RUN_1.items()], 0, 0.05)
    second = rank([row(m, t) for m, t in RUN_2.items()], 0, 0.05)
    assert first["recommended"] == "FULL_DECODE_ONLY" and first["tied"] == ["FULL_DECODE_ONLY"]
    assert second["recommended"] == "FULL_AND_PIECEWISE" and second["tied"] == ["FULL_AND_PIECEWISE"]


def test_the_two_runs_as_rounds_tie_and_the_order_decides() -> None:
    """Both runs as two rounds of one qualification: FULL_DECODE_ONLY's rounds (4,643 and 3,280 tok/s, geometric
    means) and FULL_AND_PIECEWISE's (3,366 and 4,086) overlap, so neither is faster beyond the spread."""
    fdo = row("FULL_DECODE_ONLY", RUN_1["FULL_DECODE_ONLY"], RUN_2["FULL_DECODE_ONLY"])
    fap = row("FULL_AND_PIECEWISE", RUN_1["FULL_AND_PIECEWISE"], RUN_2["FULL_AND_PIECEWISE"])
    slow = [row(m, RUN_1[m], RUN_1[m]) for m in ("NONE", "PIECEWISE")]
    r = rank([*slow, fdo, fap], 0, 0.05)
    assert r["tied"] == ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"] and r["recommended"] == "FULL_DECODE_ONLY"
    s = r["speeds"]
    assert (s["FULL_DECODE_ONLY"]["min"], s["FULL_DECODE_ONLY"]["max"]) == (3280.0, 4643.1)
    assert (s["FULL_AND_PIECEWISE"]["min"], s["FULL_AND_PIECEWISE"]["max"]) == (3365.8, 4085.9)
    assert "tie within their rounds' spread" in r["why"] and "least graph surface first" in r["why"]
    # The same whatever the order of the rows or of the rounds: nothing depends on which came first.
    for rows in itertools.permutations([*slow, fdo, fap]):
        assert rank(list(rows), 0, 0.05)["recommended"] == "FULL_DECODE_ONLY"
    swapped = [
        row("FULL_DECODE_ONLY", RUN_2["FULL_DECODE_ONLY"], RUN_1["FULL_DECODE_ONLY"]),
        row("FULL_AND_PIECEWISE", RUN_2["FULL_AND_PIECEWISE"], RUN_1["FULL_AND_PIECEWISE"]),
    ]
    assert rank(swapped, 0, 0.05)["recommended"] == "FULL_DECODE_ONLY"


def test_faster_beyond_the_spread_wins_even_against_the_order() -> None:
    fdo = row("FULL_DECODE_ONLY", (440, 4700, 16700), (450, 4800, 16800), (445, 4750, 16750))
    fap = row("FULL_AND_PIECEWISE", (480, 7000, 20000), (478, 7100, 20200), (475, 7050, 20100))
    r = rank([fdo, fap], 0, 0.05)
    assert r["recommended"] == "FULL_AND_PIECEWISE" and r["tied"] == ["FULL_AND_PIECEWISE"]
    assert "faster than FULL_DECODE_ONLY beyond their rounds' spread" in r["why"]


def test_disjoint_rounds_within_the_margin_tie() -> None:
    a = row("PIECEWISE", (100, 1000, 10000), (101, 1010, 10100))
    b = row("FULL_DECODE_ONLY", (103, 1030, 10300), (104, 1040, 10400))  # 2-4% faster in every round
    assert rank([a, b], 0, 0.05)["recommended"] == "PIECEWISE"
    assert rank([a, b], 0, 0.0)["recommended"] == "FULL_DECODE_ONLY"  # no margin: beyond the rounds is enough


def test_a_mode_that_did_not_pass_is_never_recommended_however_fast() -> None:
    rows = [row(m, t, t, verdict="fail" if m == "FULL" else "pass") for m, t in RUN_1.items()]
    r = rank(rows, 0, 0.05)
    assert "FULL" not in r["speeds"] and r["recommended"] == "FULL_DECODE_ONLY"
    rows[2]["verdict"] = "error"  # FULL_DECODE_ONLY could not be measured: the next fastest that passed
    assert rank(rows, 0, 0.05)["recommended"] == "FULL_AND_PIECEWISE"
    assert rank([row("FULL", (1, 2, 3), verdict="fail")], 0, 0.05) == {
        "recommended": None,
        "tied": [],
        "speeds": {},
        "why": "no mode passed",
    }


def test_rank_by_one_client_count() -> None:
    fdo = row("FULL_DECODE_ONLY", RUN_1["FULL_DECODE_ONLY"], RUN_2["FULL_DECODE_ONLY"])
    fap = row("FULL_AND_PIECEWISE", RUN_1["FULL_AND_PIECEWISE"], RUN_2["FULL_AND_PIECEWISE"])
    assert spread(fap, 16)["rounds"] == [5168.0, 7079.0]
    assert rank([fdo, fap], 16, 0.05)["tied"] == ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


def test_beats_is_a_strict_order() -> None:
    """Never both ways, never itself: so some passing mode is always unbeaten, and a recommendation exists."""
    spreads = [{"min": lo, "max": hi} for lo, hi in ((1, 2), (2, 3), (2.5, 4), (5, 6), (1, 9))]
    for a in spreads:
        assert not beats(a, a, 0.0)
        for b in spreads:
            assert not (beats(a, b, 0.0) and beats(b, a, 0.0))


def test_the_tie_order_is_qualifys_start_order_and_every_mode() -> None:
    assert TIE_ORDER == DEFAULT_MODES
    assert sorted(TIE_ORDER) == sorted(RUN_1)


def test_the_committed_h200_report_still_reads_and_ranks_the_same() -> None:
    """A report from before rounds (one tok_s per level, no ranking block) loads and gets the same recommendation."""
    raw = json.loads((H200 / "report.json").read_text())
    assert "ranking" not in raw and all("rounds" not in v for v in raw["rows"][0]["throughput"].values())
    again = rep.finish(raw)
    assert again["recommended"] == "FULL_DECODE_ONLY" and again["ranking"]["tied"] == ["FULL_DECODE_ONLY"]
    # 579.8 / 7,819.6 / 22,069.4 tok/s in the report
    assert again["ranking"]["speeds"]["FULL_DECODE_ONLY"]["rounds"] == [4642.5]
    text = rep.table(again)
    assert "recommended: FULL_DECODE_ONLY (the fastest mode that passed, faster than" in text
    assert "1 round(s) per mode, back to back" in text
