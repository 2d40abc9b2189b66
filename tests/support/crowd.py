"""One crowd of vLLM engines at a time on this machine, across test sessions (`make test` runs several side by side).

A vLLM CPU server takes ~2.8 GB (the PSS of its three processes with the 128 MiB KV cache, measured); the sessions
keep three running throughout (the shared good and perturbed servers, the system session's own), and two modules
start several more at once: qualify's live runs (four servers side by side) and the node tests (two pods during a
rollout, a qualification Job beside the serving pod). Both at once went past the 24 GB of the 2-core machine: the
kernel reclaimed until the API server's watches broke and every node test errored (fresh-clone run, 2026-12-05). So
each of those modules holds this lock while it runs; the other waits, and says so.

Such a module carries the `crowd` marker. One that needs no cluster runs first in its session (`run_first`). On a
fresh machine the node tests can start only once the Kubernetes build and the images are ready, so qualify's live runs
are over by then; in run 33, without the ordering, they waited 928 s for the node tests and the integration session's
last ~15 min followed them (run 34, with it: the same 53.7 min; the cold run is bound by its CPU). Warm, the node tests
start at once: qualify's ~6 min then come before their ~15, instead of after them with the rest of the integration
session behind (a warm run of 5e57c39, without the ordering, had qualify's live runs wait for them too)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from vllm_rocm_stack.config import WORK

from tests.support.terminal import say

LOCK = WORK / "tmp" / "vllm-crowd.lock"
# The longer module holds it ~15 min on the busy machine; this only ends a wait on a lock that is never released.
TIMEOUT = 3600.0


def run_first(items: list[pytest.Item]) -> None:
    """Move the tests marked `crowd` that use no cluster (marker `cluster`) to the front, in their order."""
    items[:] = sorted(items, key=lambda i: not (i.get_closest_marker("crowd") and not i.get_closest_marker("cluster")))


@contextmanager
def crowd(what: str, config: pytest.Config | None = None, timeout: float = TIMEOUT) -> Iterator[None]:
    """Hold the machine's one crowd of vLLM engines for `what` (a module's name): waits for the holder, if any."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        t0 = time.monotonic()
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another test session"
                    say(config, f"{what}: waiting for {holder} to stop its vLLM servers (memory: {LOCK})")
                    waited = True
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"{what}: {LOCK} still held after {timeout:.0f} s") from None
                time.sleep(1.0)
        if waited:
            say(config, f"{what}: the crowd lock is ours after {time.monotonic() - t0:.0f} s")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{what} (pid {os.getpid()})".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
