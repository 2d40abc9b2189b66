"""Rows, verdicts, the recommendation, the table, and the report file (format: vllm_rocm_core.qualification,
which deployment reads)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from vllm_rocm_core.files import write_atomic
from vllm_rocm_core.qualification import FORMAT, KIND, validate

from . import ranking


def verdict(row: dict[str, Any]) -> tuple[str, str]:
    """pass | fail (wrong answers) | error (could not be measured: no start, failed requests), with why."""
    if row.get("status") != "ok":
        return "error", row.get("reason") or row.get("status", "not run")
    fails = wrong_answers(row)
    errors = [
        f"{shape}: {a.get('why')}"
        for shape, a in (row.get("agreement") or {}).items()
        if not a.get("ok") and not (a.get("disagree") or "drift" in a.get("why", ""))
    ]
    if (row.get("canary") or {}).get("outcome") not in ("pass", "fail"):
        errors.append(f"canary: {(row.get('canary') or {}).get('reason', 'not run')}")
    for level, t in (row.get("throughput") or {}).items():
        if t.get("failed"):
            errors.append(f"throughput at {level} clients: {t['failed']} requests failed")
    if not row.get("throughput"):
        errors.append("no throughput measured")
    if fails:
        return "fail", "; ".join(fails + errors)
    if errors:
        return "error", "; ".join(errors)
    return "pass", ""


def wrong_answers(row: dict[str, Any]) -> list[str]:
    """Why the mode's answers are wrong (agreement beyond ties, or the canary), before any throughput is measured."""
    out = [
        f"{shape}: {a.get('why')}"
        for shape, a in (row.get("agreement") or {}).items()
        if not a.get("ok") and (a.get("disagree") or "drift" in a.get("why", ""))
    ]
    if (row.get("canary") or {}).get("outcome") == "fail":
        out.append(f"canary: {row['canary'].get('reason')}")
    return out


def ranking_basis(rank_by: int, levels: list[int]) -> str:
    if rank_by:
        return f"tok/s at {rank_by} clients"
    return "geometric mean of tok/s over " + ",".join(map(str, levels)) + " clients"


def finish(report: dict[str, Any], rank_by: int | None = None, margin: float | None = None) -> dict[str, Any]:
    """Verdicts, the recommendation and its ranking; `rank_by` and `margin` default to the report's settings."""
    settings = report.get("settings") or {}
    rank_by = int(settings.get("rank_by", 0)) if rank_by is None else rank_by
    margin = float(settings.get("tie_margin", ranking.DEFAULT_TIE_MARGIN)) if margin is None else margin
    for row in report.get("reference_runs", []) + report["rows"]:
        row["verdict"], row["verdict_reason"] = verdict(row)
    ranked = ranking.rank(report["rows"], rank_by, margin)
    report["recommended"] = ranked["recommended"]
    levels = sorted({int(k) for r in report["rows"] for k in (r.get("throughput") or {})})
    report["ranking"] = {
        "by": ranking_basis(rank_by, levels),
        "margin": margin,
        "order": list(ranking.TIE_ORDER),
        **{k: ranked[k] for k in ("tied", "why", "speeds")},
    }
    validate(report, "the report being written", deployable=False)  # what deployment reads must be readable
    return report


def new(meta: dict[str, Any]) -> dict[str, Any]:
    return {"kind": KIND, "format": FORMAT, **meta, "rows": [], "recommended": None, "baseline": None}


def save(report: dict[str, Any], path: Path) -> None:
    write_atomic(path, json.dumps(_finite(report), indent=1, allow_nan=False) + "\n")


def _finite(x: Any) -> Any:
    """JSON has no infinity: an infinite drift or gap (a token the other run did not rank) is written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _n(x: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if x in (None, "") else fmt.format(x)


def _agreement(row: dict[str, Any]) -> str:
    a = row.get("agreement")
    if row.get("role") == "reference":
        return "reference"
    if not a:
        return "-"
    bad = [s for s, v in a.items() if not v.get("ok")]
    n = sum(v.get("requests", 0) for v in a.values())
    ties = sum(v.get("tie", 0) for v in a.values())
    if bad:
        return f"FAIL in {bad[0]}" if len(bad) == 1 else f"FAIL in {len(bad)}/{len(a)} shapes"
    return f"{n}/{n} ({ties} ties)" if ties else f"{n}/{n}"


def _canary(row: dict[str, Any]) -> str:
    c = row.get("canary") or {}
    if c.get("score") is None:
        return c.get("outcome", "-")
    return f"{c['outcome']} {c['score']:.2f}/{c['drift']:.2f}"


def table(report: dict[str, Any]) -> str:
    rows = report.get("reference_runs", []) + report["rows"]
    levels = sorted({int(k) for r in rows for k in (r.get("throughput") or {})})
    head = (
        ["mode", "effective", "ready s", "capture s/GiB", "graphs"]
        + [f"tok/s@{c}" for c in levels]
        + ["agreement", "canary score/drift", "verdict"]
    )
    body = []
    for r in rows:
        graphs = sum((r.get("graphs") or {}).values())
        cap = f"{r['capture_s']:.0f}/{r['capture_gib']:.2f}" if r.get("capture_finished") else "-"
        verdict_text = r.get("verdict", "-") + (" *" if r.get("label", r["mode"]) == report.get("recommended") else "")
        body.append(
            [
                r.get("label", r["mode"]) + (" (ref)" if r.get("role") == "reference" else ""),
                (r.get("effective_mode") or "-") + (" (downgraded)" if r.get("downgraded") else ""),
                _n(r.get("ready_s"), "{:.1f}"),
                cap,
                str(graphs) if graphs else "-",
            ]
            + [_n((r.get("throughput") or {}).get(str(c), {}).get("tok_s")) for c in levels]
            + [_agreement(r), _canary(r), verdict_text]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in rows:
        if r.get("verdict") != "pass" and r.get("verdict_reason"):
            lines.append(f"{r['mode']}: {r['verdict']}: {r['verdict_reason']}")
        if r.get("downgraded"):
            lines.append(f"{r['mode']}: ran as {r.get('effective_mode')} ({r.get('downgrade_reason') or 'downgraded'})")
    lines += _ranking_lines(report)
    if report.get("gpu_product"):
        lines.append(f"measured on GPU product: {report['gpu_product']}")
    return "\n".join(lines)


def _ranking_lines(report: dict[str, Any]) -> list[str]:
    rec = report.get("recommended")
    r = report.get("ranking")
    if not r or not r.get("speeds"):  # a report from before rounds, or nothing measured
        return [f"recommended: {rec} (the fastest mode that passed)" if rec else "recommended: none: no mode passed"]
    rounds = report.get("rounds") or {}
    groups = [g for g in rounds.get("groups", []) if len(g) > 1]
    how = (
        f"{rounds.get('count', 1)} rounds, interleaved across " + "; ".join(", ".join(g) for g in groups)
        if groups and rounds.get("count", 1) > 1
        else f"{rounds.get('count', 1)} round(s) per mode, back to back"
    )
    out = [f"ranking: {r['by']}, {how}; min / median / max over the rounds:"]
    for mode, s in sorted(r.get("speeds", {}).items(), key=lambda kv: -kv[1]["median"]):
        out.append(f"  {mode}: {_n(s['min'])} / {_n(s['median'])} / {_n(s['max'])}")
    out.append(f"recommended: {rec} ({r['why']})" if rec else "recommended: none: no mode passed")
    return out
