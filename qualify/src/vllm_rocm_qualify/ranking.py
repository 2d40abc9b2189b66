"""Which passing mode to recommend: the fastest beyond the spread of its throughput rounds, or, among modes that tie,
the one first in a fixed order.

One throughput run per mode made the H200 recommendation flip between two runs on the same node (FULL_DECODE_ONLY
once, FULL_AND_PIECEWISE the next: issue 33). So throughput is measured in rounds, interleaved across the modes when
their servers run side by side (round r: every mode once, one at a time), and each mode's speed is a range:

- a round's speed is the geometric mean of its tok/s over the client counts (or tok/s at `--rank-by` clients);
- a mode's spread is the [min, max] of its rounds' speeds, reported with the median;
- mode A **beats** B when A's slowest round is faster than B's fastest round by more than the tie margin
  (`--tie-margin`, a fraction: what rounds on the same servers cannot show, e.g. how fast a server instance
  happened to start, stays a tie);
- the candidates are the passing modes no other passing mode beats (never empty: "beats" is a strict order);
  one candidate is the recommendation, several **tie** and the first in `TIE_ORDER` is recommended.

`TIE_ORDER` is least graph surface first: NONE (no graphs), PIECEWISE (attention runs outside the graphs),
FULL_DECODE_ONLY (attention inside full graphs for decode-only batches), FULL_AND_PIECEWISE (those full graphs plus
piecewise graphs for the rest), FULL (attention inside full graphs for every batch, prefills too: the mode that
answered wrong on the H200). Each step puts more of a step inside captured graphs, where the wrong-token bugs this
project exists for live (known-issues.json lists 5 / 11 / 13 / 15 wrong-token issues for the first four; FULL's
12 are all in full graphs). When speed does not separate two modes, the extra surface buys nothing shown. The order
is the same on every node and release, so the tie-break cannot flip; it is also qualify's start order.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

TIE_ORDER = ("NONE", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "FULL")
# Measured on an H200 (tests/fixtures/qualify/h200-vllm-0.26.0-side-by-side): between two runs minutes apart on the
# same node, the median round of FULL_DECODE_ONLY moved +11% and FULL_AND_PIECEWISE's -11%, while within each run
# the rounds spread by 3-15%. A 5% margin recommended F&P in one run and FDO in the next; 15% covers the run-to-run
# shift and gives FDO in all three recorded runs. A tie is not a loss: the tie order then picks.
DEFAULT_TIE_MARGIN = 0.15


def _geomean(values: list[float]) -> float:
    if not values or min(values) <= 0:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def level_rounds(level: dict[str, Any]) -> list[float]:
    """tok/s of each round at one client count (a report from before rounds has one: its tok_s)."""
    rounds = level.get("rounds")
    if isinstance(rounds, list) and rounds:
        return [float(x) for x in rounds]
    return [float(level.get("tok_s", 0.0))]


def round_speeds(row: dict[str, Any], rank_by: int) -> list[float]:
    """The ranking speed of each round: tok/s at `rank_by` clients, or the geometric mean over the client counts."""
    t = row.get("throughput") or {}
    if rank_by:
        return level_rounds(t[str(rank_by)]) if str(rank_by) in t else []
    per_level = [level_rounds(v) for v in t.values()]
    if not per_level:
        return []
    n = min(len(r) for r in per_level)  # every level is measured in every round a mode takes part in
    return [_geomean([r[i] for r in per_level]) for i in range(n)]


def spread(row: dict[str, Any], rank_by: int) -> dict[str, Any]:
    speeds = round_speeds(row, rank_by)
    if not speeds:
        return {"rounds": [], "min": 0.0, "median": 0.0, "max": 0.0}
    return {
        "rounds": [round(s, 1) for s in speeds],
        "min": round(min(speeds), 1),
        "median": round(statistics.median(speeds), 1),
        "max": round(max(speeds), 1),
    }


def beats(a: dict[str, Any], b: dict[str, Any], margin: float) -> bool:
    """Whether spread `a` is faster than spread `b` beyond both their rounds and the margin."""
    return a["min"] > b["max"] * (1.0 + margin)


def rank(rows: list[dict[str, Any]], rank_by: int, margin: float) -> dict[str, Any]:
    """The recommendation among rows with verdict pass, and why: {recommended, tied, speeds, why}."""
    speeds = {r["mode"]: spread(r, rank_by) for r in rows if r.get("verdict") == "pass"}
    speeds = {m: s for m, s in speeds.items() if s["min"] > 0}
    candidates = [m for m in speeds if not any(beats(speeds[o], speeds[m], margin) for o in speeds if o != m)]
    candidates.sort(key=lambda m: TIE_ORDER.index(m))
    out: dict[str, Any] = {"recommended": candidates[0] if candidates else None, "tied": candidates, "speeds": speeds}
    if not candidates:
        out["why"] = "no mode passed"
    elif len(candidates) == 1:
        others = [m for m in speeds if m != candidates[0]]
        out["why"] = "the fastest mode that passed" + (
            f", faster than {', '.join(others)} beyond their rounds' spread" if others else ""
        )
    else:
        out["why"] = (
            f"{', '.join(candidates)} tie within their rounds' spread (and {margin:.0%}); "
            f"{candidates[0]} comes first in the tie order (least graph surface first: {' < '.join(TIE_ORDER)})"
        )
    return out
