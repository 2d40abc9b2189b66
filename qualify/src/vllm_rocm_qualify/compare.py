"""Greedy token-for-token agreement with the reference, telling bf16 ties from wrong tokens.

Batch composition alone changes bf16 logits a little, so two correct runs can pick different tokens where the
top two are nearly tied. At the first position where the tokens differ, each run's own logprobs say how far
apart it ranks the two tokens; within `tol` nats in both runs is a tie (the rest of the text is not compared,
it continues differently), more is a disagreement: a token the other run did not consider close."""

from __future__ import annotations

import math
from typing import Any

from .client import Output


def compare_one(ref: Output, cand: Output, tol: float) -> dict[str, Any]:
    if ref.error or cand.error:
        return {"kind": "error", "error": cand.error or f"reference: {ref.error}"}
    n = min(len(ref.tokens), len(cand.tokens))
    k = next((i for i in range(n) if ref.tokens[i] != cand.tokens[i]), n)
    drift = max((abs(ref.lps[i] - cand.lps[i]) for i in range(k)), default=0.0)
    if k == n and len(ref.tokens) == len(cand.tokens):
        return {"kind": "exact", "drift": drift}
    if k == n:
        return {
            "kind": "disagree",
            "drift": drift,
            "at": k,
            "gap": math.inf,
            "why": f"{len(cand.tokens)} tokens, reference {len(ref.tokens)}",
        }
    r, c = ref.tokens[k], cand.tokens[k]
    ref_gap = ref.lps[k] - ref.top[k].get(c, -math.inf) if k < len(ref.top) else math.inf
    cand_gap = cand.lps[k] - cand.top[k].get(r, -math.inf) if k < len(cand.top) else math.inf
    gap = max(ref_gap, cand_gap)
    kind = "tie" if gap <= tol else "disagree"
    return {"kind": kind, "drift": drift, "at": k, "gap": gap, "ref_token": r, "token": c}


def compare_shape(refs: list[Output], cands: list[Output], tol: float) -> dict[str, Any]:
    """Counts per outcome, the largest logprob drift over agreeing tokens, the worst divergence, a verdict."""
    if len(refs) != len(cands):
        return {"requests": len(cands), "ok": False, "why": f"{len(cands)} answers for {len(refs)} requests"}
    results = [compare_one(r, c, tol) for r, c in zip(refs, cands, strict=True)]
    counts = {k: sum(1 for x in results if x["kind"] == k) for k in ("exact", "tie", "disagree", "error")}
    drift = max((x.get("drift", 0.0) for x in results), default=0.0)
    worst_i, worst = max(enumerate(results), key=lambda ix: ix[1].get("gap", -1.0), default=(None, {}))
    out: dict[str, Any] = {"requests": len(results), **counts, "max_drift": round(drift, 4)}
    if worst_i is not None and "gap" in worst:
        out["worst"] = {
            "request": worst_i,
            "at": worst["at"],
            "gap": None if math.isinf(worst["gap"]) else round(worst["gap"], 4),
            **{k: worst[k] for k in ("ref_token", "token", "why") if k in worst},
        }
    reasons = []
    if counts["error"]:
        first = next(x["error"] for x in results if x["kind"] == "error")
        reasons.append(f"{counts['error']} requests failed ({first[:120]})")
    if counts["disagree"]:
        reasons.append(f"{counts['disagree']}/{len(results)} answers differ beyond ties")
    if drift > tol:
        reasons.append(f"logprobs of agreeing tokens drift {drift:.3f} > {tol} nats")
    out["ok"] = not reasons
    if reasons:
        out["why"] = "; ".join(reasons)
    return out
