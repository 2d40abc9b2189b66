"""What each test costs the machine in CPU, for deciding where a CPU-bound suite's time goes (issue 31).

On the 2-core machine the suite is bound by CPU, not by waits: a test's wall time under `make test` says more about
what ran beside it than about the test. This plugin reads the machine's busy time (/proc/stat: user, nice, system,
irq, softirq; not idle, iowait or the hypervisor's steal) before and after each test's setup, call and teardown, so
that the CPU of everything a test started counts, wherever it runs: vLLM servers in their own sessions, containers
under conmon, pods under containerd-shim, the API server serving them. A module's fixtures count in its first test's
setup, as with --durations.

The figures are the whole machine's: they mean what they say only when this session runs alone on an otherwise idle
machine (the session's start prints how busy the machine was just before, as a check). Alone, a vLLM server's engine
core spins (sched_yield) on the shared-memory queue while its worker computes, and that spin is counted: ~0.9 CPU-s
per CPU-s of the worker on the idle machine, ~0.05 beside a CPU hog, where it yields (vLLM 0.32.0,
`shm_broadcast.SpinCondition`, measured 2026-12-06). So a serving test's figure here is an upper bound.

    python -m pytest -p tests.support.cpu_cost --cpu-cost=cost.json -m "not unit"

writes every phase to cost.json and prints the tests that cost most, with the session's total.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TOP = 30  # tests in the printed table
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user nice system irq softirq (guest time is within user)


def busy_seconds(stat: str | None = None) -> float:
    """The machine's busy CPU time since boot, in seconds."""
    text = stat if stat is not None else Path("/proc/stat").read_text()
    line = next(line for line in text.splitlines() if line.startswith("cpu "))
    fields = [int(x) for x in line.split()[1:]]
    return sum(fields[i] for i in _BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-cost",
        metavar="PATH",
        help="write each test phase's machine-wide CPU seconds to PATH (JSON) and print the costliest tests",
    )


class CpuCost:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, object]] = []
        self.t0 = time.monotonic()
        self.cpu0 = busy_seconds()
        self._totals: tuple[float, float] | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        yield from self._measure(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        yield from self._measure(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield from self._measure(item, "teardown")

    def _measure(self, item: pytest.Item, phase: str) -> Iterator[None]:
        t, cpu = time.monotonic(), busy_seconds()
        yield
        self.rows.append(
            {
                "test": item.nodeid,
                "phase": phase,
                "wall_s": round(time.monotonic() - t, 2),
                "cpu_s": round(busy_seconds() - cpu, 2),
            }
        )

    def totals(self) -> tuple[float, float]:
        """The session's wall and machine CPU seconds, taken once at its end: the JSON and the table say the same."""
        if self._totals is None:
            self._totals = (time.monotonic() - self.t0, busy_seconds() - self.cpu0)
        return self._totals

    def pytest_sessionfinish(self) -> None:
        wall, cpu = self.totals()
        self.path.write_text(json.dumps({"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "phases": self.rows}))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        wall, cpu = self.totals()
        per_test: dict[str, list[float]] = {}
        for row in self.rows:
            acc = per_test.setdefault(str(row["test"]), [0.0, 0.0])
            acc[0] += float(row["wall_s"])  # type: ignore[arg-type]
            acc[1] += float(row["cpu_s"])  # type: ignore[arg-type]
        tr = terminalreporter
        tr.write_sep("=", f"machine CPU per test (top {TOP}; {self.path})")
        tr.write_line(f"session: {cpu / 60:.1f} CPU-min in {wall / 60:.1f} min ({cpu / wall:.2f} cores busy)")
        tr.write_line(f"{'CPU-s':>8} {'wall s':>8}  test (setup + call + teardown)")
        for test, (w, c) in sorted(per_test.items(), key=lambda kv: -kv[1][1])[:TOP]:
            tr.write_line(f"{c:8.1f} {w:8.1f}  {test}")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--cpu-cost")
    if path:
        before = busy_seconds()
        time.sleep(2.0)
        busy = (busy_seconds() - before) / 2.0
        plugin = CpuCost(Path(path))
        config.pluginmanager.register(plugin, "cpu-cost")
        print(f"cpu-cost: the machine was {busy:.2f} cores busy before this session (alone, it should be ~0)")
