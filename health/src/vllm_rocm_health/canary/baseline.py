"""Baselines: what a known-good server answered, stored and loaded explicitly (never re-taken silently)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from vllm_rocm_core.files import write_atomic

from . import fingerprint, problems

# 2: the answers to the long prompts (the prefill rows of the mixed batch) are recorded and checked. A format-1 file
# has none: it loads with long_prompts 0, so it matches only a canary run with --canary-long-prompts 0.
FORMAT = 2


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
    long_prompts: int = 0
    long_answers: list[int | None] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    server_version: str = ""
    notes: str = ""
    format: int = FORMAT

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Baseline:
        try:
            raw: Any = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise BaselineError(
                f"baseline {path} not found: record one with "
                "`vllm-rocm-health baseline record --out FILE` against a known-good server"
            ) from e
        except (OSError, ValueError) as e:
            raise BaselineError(f"baseline {path} is unreadable: {e}") from e
        return cls.from_raw(raw, f"baseline {path}")

    @classmethod
    def from_raw(cls, raw: Any, source: str = "baseline") -> Baseline:
        """A baseline from its JSON object (a file's, or the one a qualification report embeds), checked in full."""
        if not isinstance(raw, dict):
            raise BaselineError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        fmt = raw.get("format")
        if type(fmt) is not int:  # `true` equals 1 in Python: a JSON boolean (or 1.0) is no format number
            raise BaselineError(f"{source}: format {fmt!r}, this sidecar reads {FORMAT}")
        if fmt == 1 and not ({"long_prompts", "long_answers"} & set(raw)):
            raw = {**raw, "format": FORMAT}  # recorded without long-prompt answers: long_prompts 0
        if raw.get("format") != FORMAT:
            raise BaselineError(f"{source}: format {raw.get('format')!r}, this sidecar reads {FORMAT}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        missing = sorted(
            f.name for f in fields(cls) if f.name not in raw and f.default is MISSING and f.default_factory is MISSING
        )
        if unknown or missing:
            parts = [f"unknown fields {unknown}"] if unknown else []
            parts += [f"missing fields {missing}"] if missing else []
            raise BaselineError(f"{source}: " + "; ".join(parts))
        b = cls(**raw)
        problem = b.problem()
        if problem:
            raise BaselineError(f"{source}: {problem}")
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
        if not is_int(self.long_prompts) or self.long_prompts < 0:
            return f"long_prompts {self.long_prompts!r} is not a non-negative integer"
        if not isinstance(self.long_answers, list) or not all(a is None or is_int(a) for a in self.long_answers):
            return f"long_answers {str(self.long_answers)[:80]} are not a list of integers or nulls"
        if len(self.long_answers) != self.long_prompts:
            return f"{len(self.long_answers)} long_answers for {self.long_prompts} long prompts"
        if not isinstance(self.fingerprints, list) or len(self.fingerprints) != len(fingerprint.REFERENCE_TEXTS):
            return (
                f"fingerprints: expected {len(fingerprint.REFERENCE_TEXTS)} lists (one per reference text), "
                f"got {str(self.fingerprints)[:80]}"
            )
        for i, fp in enumerate(self.fingerprints):
            # vLLM gives the first prompt token no logprob (null); every other one must be a finite number.
            if (
                not isinstance(fp, list)
                or len(fp) < 2
                or not all(is_num(v) for v in fp[1:])
                or not (fp[0] is None or is_num(fp[0]))
            ):
                return f"fingerprints[{i}] is not a list of finite logprobs: {str(fp)[:80]}"
        if not is_num(self.created):
            return f"created {self.created!r} is not a timestamp"
        for name in ("server_version", "notes"):
            if not isinstance(getattr(self, name), str):
                return f"{name} {getattr(self, name)!r} is not a string"
        return ""

    def check_matches(self, model: str, seed: int, num_problems: int, long_prompts: int | None = None) -> None:
        """A baseline is only valid for the model and problem set it was taken with."""
        problems = []
        if long_prompts is not None and long_prompts != self.long_prompts:
            old = " (a baseline recorded before long-prompt answers were kept has 0)" if self.long_prompts == 0 else ""
            problems.append(f"{long_prompts} long prompts per run != baseline's {self.long_prompts}{old}")
        if model != self.model:
            problems.append(f"model {model!r} != baseline's {self.model!r}")
        if seed != self.seed:
            problems.append(f"seed {seed} != baseline's {self.seed}")
        if num_problems != self.num_problems:
            problems.append(f"num_problems {num_problems} != baseline's {self.num_problems}")
        if problems:
            raise BaselineError(
                "baseline does not match this canary: "
                + "; ".join(problems)
                + " (record a new baseline for this configuration)"
            )
