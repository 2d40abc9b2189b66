"""Seeded arithmetic word problems with exact answers, asked few-shot at temperature 0, scored exactly."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

_NAMES = ["Tom", "Ana", "Lee", "Mia", "Sam", "Ivy", "Raj", "Zoe"]
_THINGS = ["apples", "books", "coins", "pens", "cards", "shells"]
_FEW_SHOT = (
    "Q: Ben has 2 cups. He gets 3 more cups. How many cups does Ben have?\nA: 5\n\n"
    "Q: Eve has 4 hats. She gets 1 more hat. How many hats does Eve have?\nA: 5\n\n"
    "Q: Max has 6 keys. He gets 2 more keys. How many keys does Max have?\nA: 8\n\n"
)
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int

    @property
    def prompt(self) -> str:
        return f"{_FEW_SHOT}Q: {self.question}\nA:"


def generate(seed: int, count: int) -> list[Problem]:
    """Small additions: a 135M model gets many right, so a corrupted one visibly scores lower."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        pron = "She" if name in ("Ana", "Mia", "Ivy", "Zoe") else "He"
        out.append(Problem(f"{name} has {a} {thing}. {pron} gets {b} more {thing}. "
                           f"How many {thing} does {name} have?", a + b))
    return out


def parse_answer(text: str) -> int | None:
    """The first integer of the completion, or None."""
    m = _INT.search(text)
    return int(m.group()) if m else None


def score(problems: list[Problem], answers: list[int | None]) -> float:
    if not problems:
        return 0.0
    return sum(1 for p, a in zip(problems, answers, strict=True) if a == p.answer) / len(problems)


# Long texts for the prefill side of mixed batches; their own outputs are not scored.
LONG_TEXT = (
    "The history of computing is a story of layered abstractions. Early machines were programmed by rewiring "
    "panels; stored programs followed, then assemblers, compilers, operating systems and networks. Each layer "
    "hid the one below it and made new kinds of work possible, while also making failures in the lower layers "
    "harder to see from above. "
) * 5
