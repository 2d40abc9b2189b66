"""Processes share one image store (`make images` while `make test` runs containers of the images; two pytest
sessions of one checkout, each building what it tests). A build removes leftovers and empties an oversized store only
when no other process holds a working container (`Buildah.container`) and no other container exists (`Buildah.idle`);
otherwise it goes on at once and touches nothing. Real buildah on an empty store of the test's own: no image, no
container."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import Buildah

from tests.support.buildah_store import empty_store


@pytest.fixture
def store(tmp_path: Path) -> Buildah:
    return empty_store(tmp_path / "store")


def test_an_empty_store_is_idle(store: Buildah) -> None:
    with store.idle() as idle:
        assert idle


def test_a_working_container_held_by_another_process_keeps_the_store_busy(store: Buildah) -> None:
    """What `container()` holds while it lives, held by another process: `idle` answers False without waiting,
    and True again once that process lets go."""
    lock = store.root / "containers.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(lock)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_SH); print('held', flush=True)\n"
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        with store.idle() as idle:
            assert not idle
        assert time.monotonic() - t0 < 5, "idle() waited for the holder"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    with store.idle() as idle:
        assert idle


def test_a_shared_hold_does_not_block_another_shared_hold(store: Buildah) -> None:
    """Two working containers at once (two sessions reading images) never wait on each other."""
    lock = store.root / "containers.lock"
    with open(lock, "a+") as a, open(lock, "a+") as b:
        fcntl.flock(a, fcntl.LOCK_SH)
        fcntl.flock(b, fcntl.LOCK_SH | fcntl.LOCK_NB)  # raises if it would wait
