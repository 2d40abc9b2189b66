"""What the canary remembers across runs: which problems it saw answered wrong, run after run (issue 35).

One run's score tolerates a wrong answer or two: bf16 batch composition flips a close answer now and then, and the
tolerance is there for that. A problem the baseline answered right that the server answers wrong again and again is
not that noise, whatever the score: STEADY wrong answers within the last WINDOW completed runs fail the canary.

- Baseline problems (the same every run) are remembered one by one, by their index in the problem set; only those
  the baseline answered right are tracked (for the others there is no right answer on record to hold the server to).
- Fresh problems are new every run, so "the same problem" is their family (count, copy): a family is steadily wrong
  when at least one of its answers was wrong in STEADY of the last WINDOW runs.

Only runs that got to their end count (a `pass` or a `fail`; an `error` asked nothing to the end). The memory is the
sidecar process's: a new engine instance keeps it (a restart that fixed nothing must not wipe the evidence; one that
fixed the fault shows it by answering right), a sidecar restart starts it empty."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

WINDOW = 3  # completed runs remembered
STEADY = 2  # wrong answers within them that fail the canary


class History:
    def __init__(self) -> None:
        self._problems: dict[int, deque[bool]] = {}
        self._families: dict[str, deque[bool]] = {}

    def record(self, problems: Mapping[int, bool], families: Mapping[str, bool]) -> None:
        """One completed run: for each tracked baseline problem it asked, whether the answer was wrong; for each
        fresh family it asked, whether any of its answers was wrong."""
        for i, wrong in problems.items():
            self._problems.setdefault(i, deque(maxlen=WINDOW)).append(bool(wrong))
        for name, wrong in families.items():
            self._families.setdefault(name, deque(maxlen=WINDOW)).append(bool(wrong))

    def steady_problems(self) -> list[int]:
        return sorted(i for i, runs in self._problems.items() if sum(runs) >= STEADY)

    def steady_families(self) -> list[str]:
        return sorted(f for f, runs in self._families.items() if sum(runs) >= STEADY)

    def wrong_runs(self, problem: int) -> int:
        return sum(self._problems.get(problem, ()))

    def family_wrong_runs(self, family: str) -> int:
        return sum(self._families.get(family, ()))
