"""Replay: re-derive a report's log columns from its recorded server logs with today's parser, and its verdicts
and recommendation with today's rules; any difference from the report is printed. CI runs this on the logs of
a real GPU run (tests/fixtures/qualify/), so the parser and the report code meet real capture logs there."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from . import report as rep
from .logs import FIELDS, read_facts


def replay(report_path: Path, logs_dir: Path, rank_by: int | None = None) -> tuple[dict[str, Any], list[str]]:
    recorded = json.loads(report_path.read_text())
    again = copy.deepcopy(recorded)
    diffs: list[str] = []
    for row in again.get("reference_runs", []) + again["rows"]:
        label = row.get("label", row["mode"])
        if not row.get("log"):
            continue
        path = logs_dir / Path(row["log"]).name
        if not path.exists():
            diffs.append(f"{label}: log {path} missing")
            continue
        facts = read_facts(path, row["mode"], row.get("log_bytes"))
        for key in FIELDS:
            if key in row and json.loads(json.dumps(facts[key])) != row[key]:
                diffs.append(f"{label}: {key} is {facts[key]!r} in the log, {row[key]!r} in the report")
            row[key] = facts[key]
    rep.finish(again, recorded.get("settings", {}).get("rank_by", 0) if rank_by is None else rank_by)
    for old, new in zip(
        recorded.get("reference_runs", []) + recorded["rows"],
        again.get("reference_runs", []) + again["rows"],
        strict=True,
    ):
        if old.get("verdict") != new["verdict"]:
            diffs.append(
                f"{new.get('label', new['mode'])}: verdict {new['verdict']} now, {old.get('verdict')} in the report"
            )
    if recorded.get("recommended") != again["recommended"]:
        diffs.append(f"recommended {again['recommended']} now, {recorded.get('recommended')} in the report")
    return again, diffs
