"""Baselines: what a known-good server answered, stored and loaded explicitly (never re-taken silently)."""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import fingerprint, problems

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
            raw: Any = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise BaselineError(f"baseline {path} not found: record one with "
                                "`vllm-rocm-health baseline record --out FILE` against a known-good server") from e
        except (OSError, ValueError) as e:
            raise BaselineError(f"baseline {path} is unreadable: {e}") from e
        if not isinstance(raw, dict):
            raise BaselineError(f"baseline {path}: expected a JSON object, got {type(raw).__name__}")
        if raw.get("format") != FORMAT:
            raise BaselineError(f"baseline {path}: format {raw.get('format')!r}, this sidecar reads {FORMAT}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        missing = sorted(f.name for f in fields(cls) if f.name not in raw and f.default is MISSING
                         and f.default_factory is MISSING)
        if unknown or missing:
            parts = [f"unknown fields {unknown}"] if unknown else []
            parts += [f"missing fields {missing}"] if missing else []
            raise BaselineError(f"baseline {path}: " + "; ".join(parts))
        b = cls(**raw)
        problem = b.problem()
        if problem:
            raise BaselineError(f"baseline {path}: {problem}")
        return b

    def problem(self) -> str:
        """What is wrong with this baseline, naming the field; "" when it can be relied on. A baseline decides what
        counts as right, so every field is checked for type and range, and the score against the answers."""
        def is_int(x: Any) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        def is_num(x: Any) -> bool:
            return (isinstance(x, (int, float)) and not isinstance(x, bool)) and math.isfinite(x)

        if not isinstance(self.model, str) or not self.model:
            return f"model {self.model!r} is not a model name"
        for name in ("seed", "num_problems", "max_tokens"):
            value = getattr(self, name)
            if not is_int(value) or value < (1 if name != "seed" else 0):
                return f"{name} {value!r} is not a {'non-negative' if name == 'seed' else 'positive'} integer"
        if not isinstance(self.answers, list) or not all(a is None or is_int(a) for a in self.answers):
            return f"answers {str(self.answers)[:80]} are not a list of integers or nulls"
        if len(self.answers) != self.num_problems:
            return f"{len(self.answers)} answers for {self.num_problems} problems"
        if not is_num(self.score) or not 0.0 <= self.score <= 1.0:
            return f"score {self.score!r} is not a number from 0 to 1"
        expected = problems.score(problems.generate(self.seed, self.num_problems), self.answers)
        if abs(expected - self.score) > 1e-9:
            return f"score {self.score} does not match its answers ({expected:.3f}): the file was edited"
        if not isinstance(self.fingerprints, list) or len(self.fingerprints) != len(fingerprint.REFERENCE_TEXTS):
            return (f"fingerprints: expected {len(fingerprint.REFERENCE_TEXTS)} lists (one per reference text), "
                    f"got {str(self.fingerprints)[:80]}")
        for i, fp in enumerate(self.fingerprints):
            # vLLM gives the first prompt token no logprob (null); every other one must be a finite number.
            if not isinstance(fp, list) or len(fp) < 2 or not all(is_num(v) for v in fp[1:]) \
                    or not (fp[0] is None or is_num(fp[0])):
                return f"fingerprints[{i}] is not a list of finite logprobs: {str(fp)[:80]}"
        if not is_num(self.created):
            return f"created {self.created!r} is not a timestamp"
        for name in ("server_version", "notes"):
            if not isinstance(getattr(self, name), str):
                return f"{name} {getattr(self, name)!r} is not a string"
        return ""

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
