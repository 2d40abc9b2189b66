"""`choose_driver`: overlay where this kernel mounts it on the store's filesystem, else vfs (every layer a full copy,
~5x the disk). Image builds of two test sessions choose at the same moment; with one shared probe directory, one
session's cleanup removed the other's directories mid-probe, and that session built into vfs (run 25: 19 GB of vfs
beside 7.6 GB of overlay, then a full disk)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import DRIVER_ENV, choose_driver


@pytest.fixture(autouse=True)
def _unforced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DRIVER_ENV, raising=False)


def test_probes_at_once_agree_and_leave_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the probe mounts overlayfs: root only")
    store = tmp_path / "store"
    alone = choose_driver(store)
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda _: choose_driver(store), range(32)))
    assert together == [alone] * 32
    assert list(store.iterdir()) == []  # every probe removed its own directory


def test_a_forced_driver_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DRIVER_ENV, "vfs")
    assert choose_driver(tmp_path) == "vfs"
    monkeypatch.setenv(DRIVER_ENV, "btrfs")
    with pytest.raises(Exception, match="must be overlay or vfs"):
        choose_driver(tmp_path)
