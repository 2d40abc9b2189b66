"""Baselines: what a known-good server answered, stored and loaded explicitly (never re-taken silently)."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1


class BaselineError(Exception):
    pass


@dataclass
class Baseline:
    model: str
    seed: int
    num_problems: int
    max_tokens: int
    answers: list[int | None]
    score: float
    fingerprints: list[list[float | None]]
    created: float = field(default_factory=time.time)
    server_version: str = ""
    notes: str = ""
    format: int = FORMAT

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Baseline:
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise BaselineError(f"baseline {path} not found: record one with "
                                "`vllm-rocm-health baseline record --out FILE` against a known-good server") from e
        except (OSError, ValueError) as e:
            raise BaselineError(f"baseline {path} is unreadable: {e}") from e
        if raw.get("format") != FORMAT:
            raise BaselineError(f"baseline {path}: format {raw.get('format')!r}, this sidecar reads {FORMAT}")
        try:
            b = cls(**raw)
        except TypeError as e:
            raise BaselineError(f"baseline {path}: {e}") from e
        if len(b.answers) != b.num_problems:
            raise BaselineError(f"baseline {path}: {len(b.answers)} answers for {b.num_problems} problems")
        return b

    def check_matches(self, model: str, seed: int, num_problems: int) -> None:
        """A baseline is only valid for the model and problem set it was taken with."""
        problems = []
        if model != self.model:
            problems.append(f"model {model!r} != baseline's {self.model!r}")
        if seed != self.seed:
            problems.append(f"seed {seed} != baseline's {self.seed}")
        if num_problems != self.num_problems:
            problems.append(f"num_problems {num_problems} != baseline's {self.num_problems}")
        if problems:
            raise BaselineError("baseline does not match this canary: " + "; ".join(problems)
                                + " (record a new baseline for this configuration)")
