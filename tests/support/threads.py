"""Where a process tree's threads may run: the CPU affinity of every thread of a process and its descendants, read
from /proc. A container's processes are there too, under the host pid that `podman inspect` gives (State.Pid)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Thread:
    pid: int
    tid: int
    process: str  # the process's name (comm), e.g. VLLM::Worker
    cpus: frozenset[int]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in (PROC / str(pid) / "task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the thread or process ended meanwhile
            pass
    return out


def tree(pid: int) -> list[int]:
    """`pid` and its descendants, parents first."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop(0)
        if p not in seen:
            seen.append(p)
            todo += _children(p)
    return seen


def threads(pid: int) -> list[Thread]:
    """Every thread of `pid` and its descendants, with the CPUs it may run on (threads that end meanwhile are left
    out)."""
    out = []
    for p in tree(pid):
        try:
            name = (PROC / str(p) / "comm").read_text().strip()
            tids = [int(t.name) for t in (PROC / str(p) / "task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            try:
                out.append(Thread(p, tid, name, frozenset(os.sched_getaffinity(tid))))
            except OSError:
                continue
    return out


def bound(pid: int, allowed: frozenset[int] | None = None) -> list[str]:
    """The threads of the tree that may not run on every CPU of `allowed` (this process's, by default), as
    'name pid/tid: cpus' lines: empty when the kernel may place each of them anywhere."""
    allowed = frozenset(os.sched_getaffinity(0)) if allowed is None else allowed
    return [f"{t.process} {t.pid}/{t.tid}: {sorted(t.cpus)}" for t in threads(pid) if not allowed <= t.cpus]
