"""Problems with exact answers, asked few-shot at temperature 0, scored exactly.

Two kinds. The baseline's problems (`generate`): sums seeded by --canary-seed, the same every run; the baseline holds
what a known-good server answered to each, and the score and the per-problem history compare with it. Fresh problems
(`fresh`): generated from a seed drawn anew for every run, so each run asks what no earlier run asked, in families
whose answer the sidecar computes itself and that any served model answers right (measured on SmolLM2-135M-Instruct,
the smallest model the tests run: health/README.md), so no recorded answer is needed to judge them."""

from __future__ import annotations

import random
import re
from collections.abc import Container
from dataclasses import dataclass

# Plain few-shot sums: a 135M model gets most right in this form (11/16 measured with SmolLM2-135M) and
# almost none as word problems, so a drop in score means something. Larger models score near 1.
_FEW_SHOT = "2 + 3 = 5\n4 + 1 = 5\n6 + 2 = 8\n3 + 3 = 6\n"
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int
    family: str = "sum"

    @property
    def prompt(self) -> str:
        if self.family == "sum":
            return f"{_FEW_SHOT}{self.question} ="
        return self.question  # fresh problems carry their whole prompt


def generate(seed: int, count: int) -> list[Problem]:
    """Single-digit additions with exact answers."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        out.append(Problem(f"{a} + {b}", a + b))
    return out


# Fresh families: the prompt and its computed answer from a random source. Continuing a count and copying a number:
# SmolLM2-135M-Instruct answered every one of them right on the vLLM CPU server (health/README.md has the figures),
# where it gets only ~70% of single-digit sums; a server that garbles a prompt it has not seen gets them wrong.
_COPY_SHOT = "Copy: 4821 -> 4821\nCopy: 1937 -> 1937\nCopy: 5063 -> 5063\n"


def _count(rng: random.Random) -> Problem:
    # Never up to or across a hundred: the small model's only miss in 100 counts was 695..698 -> 700 (for 699).
    x = rng.randrange(1, 10) * 100 + rng.randint(10, 90)
    return Problem(f"{x}, {x + 1}, {x + 2}, {x + 3},", x + 4, "count")


def _copy(rng: random.Random) -> Problem:
    x = rng.randint(1000, 9999)
    return Problem(f"{_COPY_SHOT}Copy: {x} ->", x, "copy")


FRESH_FAMILIES = {"count": _count, "copy": _copy}


def fresh(seed: int, count: int, avoid: Container[str] = ()) -> list[Problem]:
    """`count` fresh problems from a run's own seed, the families taken in turn from a seeded start (so one family
    does not always get the extra problem of an odd count). A prompt in `avoid` (what earlier runs asked) is drawn
    again: the count family has 729 prompts, so a random draw alone repeats one within a few dozen runs."""
    rng = random.Random(seed)
    families = list(FRESH_FAMILIES.values())
    start = rng.randrange(len(families))
    out: list[Problem] = []
    for i in range(count):
        make = families[(start + i) % len(families)]
        for _ in range(FRESH_DRAWS):
            p = make(rng)
            if p.prompt not in avoid and all(p.prompt != q.prompt for q in out):
                break
        else:
            raise ValueError(f"no {p.family} problem left that avoids those asked before")
        out.append(p)
    return out


FRESH_DRAWS = 1000  # draws per problem before giving up: far more than the avoided share of any family needs


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
