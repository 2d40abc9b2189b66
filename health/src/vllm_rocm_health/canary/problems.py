"""Seeded arithmetic problems with exact answers, asked few-shot at temperature 0, scored exactly."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

# Plain few-shot sums: a 135M model gets most right in this form (11/16 measured with SmolLM2-135M) and
# almost none as word problems, so a drop in score means something. Larger models score near 1.
_FEW_SHOT = "2 + 3 = 5\n4 + 1 = 5\n6 + 2 = 8\n3 + 3 = 6\n"
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int

    @property
    def prompt(self) -> str:
        return f"{_FEW_SHOT}{self.question} ="


def generate(seed: int, count: int) -> list[Problem]:
    """Single-digit additions with exact answers."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        out.append(Problem(f"{a} + {b}", a + b))
    return out


def parse_answer(text: str) -> int | None:
    """The first integer of the completion, or None."""
    m = _INT.search(text)
    return int(m.group()) if m else None


def score(problems: list[Problem], answers: list[int | None]) -> float:
    if not problems:
        return 0.0
    return sum(1 for p, a in zip(problems, answers, strict=True) if a == p.answer) / len(problems)


# Long texts for the prefill side of mixed batches. Each long prompt ends in a sum of its own, and its answer must be
# the baseline's: the long prompts are the prefill rows of the mixed batch, the rows the AITER FA bug corrupted.
LONG_TEXT = (
    "The history of computing is a story of layered abstractions. Early machines were programmed by rewiring "
    "panels; stored programs followed, then assemblers, compilers, operating systems and networks. Each layer "
    "hid the one below it and made new kinds of work possible, while also making failures in the lower layers "
    "harder to see from above. "
) * 5


def long_problems(seed: int, count: int) -> list[Problem]:
    """The sums the long prompts end in (a problem set of their own, so the short problems stay as recorded)."""
    return generate(seed + 1, count)


def long_prompt(problem: Problem) -> str:
    return f"{LONG_TEXT}\n\n{problem.prompt}"
