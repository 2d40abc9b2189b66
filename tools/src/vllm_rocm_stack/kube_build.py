"""The Kubernetes build's lock: tools/kube/build.sh holds it (flock) while it runs, `make test` starts the build beside
the test sessions (vllm_rocm_stack.testrun), and the cluster tests wait for it to be free before they look for the
binaries (tests/support/kube.py)."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from .config import REPO, WORK
from .disk import tree_bytes

COMMAND = ["bash", str(REPO / "tools" / "kube" / "build.sh")]
LOCK = WORK / "kube" / ".build.lock"
# A cold build on 2 shared cores measured 8 min alone and 30 min under heavy load; past this, something is wrong.
WAIT = 3600.0
# The build's Go caches at their largest in a cold build: 3.1 GiB (3.3 GB) when the Kubernetes binaries are done,
# in every fresh-clone run measured (runs 20-26; CoreDNS's after that, 818 MiB, start from empty). A bound with a
# margin, for what is still to come.
GO_CACHE_PEAK = 4_000_000_000


def go_cache() -> Path:
    """Where tools/kube/build.sh keeps the Go caches (its GO_CACHE line: outside the clone, for every checkout)."""
    env = os.environ.get("VLLM_ROCM_GO_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-rocm" / "go"


def running(lock: Path = LOCK) -> bool:
    """True while a build holds the lock."""
    if not lock.exists():
        return False
    with lock.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def wait(lock: Path = LOCK, timeout: float = WAIT) -> None:
    """Return once no build runs; say once that it waits, and for how long it did."""
    t0 = time.monotonic()
    said = False
    while running(lock):
        if not said:
            print(f"waiting for the Kubernetes build to finish (tools/kube/build.sh holds {lock})")
            said = True
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"the Kubernetes build still runs after {timeout:.0f} s ({lock})")
        time.sleep(2.0)
    if said:
        print(f"the Kubernetes build finished; waited {time.monotonic() - t0:.0f} s")


def go_cache_growth_left(cache: Path | None = None, lock: Path = LOCK) -> int:
    """What a running build's Go caches may still take of the disk: their measured peak less what they hold now (the
    caches it renamed aside to remove are not counted: they only shrink)."""
    return max(0, GO_CACHE_PEAK - tree_bytes(cache or go_cache())) if running(lock) else 0


def wait_for_trims(cache: Path | None = None, timeout: float = WAIT) -> None:
    """Return once no removal of the Go caches that a build renamed aside still runs (VLLM_ROCM_TRIM_CACHES=1: they go
    in the background, holding a shared lock on `<cache>.trim.lock`, which a removal that dies releases)."""
    cache = cache or go_cache()
    lock = cache.with_name(cache.name + ".trim.lock")
    if not lock.exists():
        return
    deadline = time.monotonic() + timeout
    with lock.open("a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the Go caches' removal still runs after {timeout:.0f} s ({lock})") from None
                time.sleep(1.0)  # a lock held only while the removal runs: once free, it stays free
                continue
            fcntl.flock(f, fcntl.LOCK_UN)
            return
