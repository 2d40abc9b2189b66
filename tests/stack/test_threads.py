"""tests/support/threads.py: it finds a thread bound to one core anywhere in a process tree (what the live tests of
the CPU build's servers assert there is none of), and none where nothing is bound."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.support import threads

# A parent whose child binds one of its threads (not its main one) to the first CPU, then waits.
CHILD = (
    "import os, threading, time\n"
    "def bind(): os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); open('bound', 'w').close(); time.sleep(60)\n"
    "threading.Thread(target=bind, name='pinned', daemon=True).start(); time.sleep(60)\n"
)
PARENT = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]])"


@pytest.fixture
def tree(tmp_path) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], cwd=tmp_path, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binding to one CPU narrows nothing on one CPU")
def test_a_thread_bound_in_a_grandchild_is_found(tree: subprocess.Popen, tmp_path) -> None:
    deadline = time.monotonic() + 60
    while not (tmp_path / "bound").exists():
        assert tree.poll() is None and time.monotonic() < deadline, "the child never bound its thread"
        time.sleep(0.05)
    found = threads.bound(tree.pid)
    assert len(found) == 1 and f": [{min(os.sched_getaffinity(0))}]" in found[0], found
    assert len(threads.tree(tree.pid)) == 2
    # Against a narrower allowed set, nothing is wider than it.
    assert threads.bound(tree.pid, frozenset({min(os.sched_getaffinity(0))})) == []


def test_an_unbound_tree_has_nothing_bound() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert [t.tid for t in threads.threads(proc.pid)] == [proc.pid]
        assert threads.bound(proc.pid) == []
    finally:
        proc.kill()
        proc.wait()
