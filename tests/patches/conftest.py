"""Fixtures for the patch-tool tests: real vLLM release trees (fetched once per cache) and tree snapshots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.vllm_releases import copy_release_tree, release_tree


@pytest.fixture(scope="session")
def vllm_release() -> Callable[[str], Path]:
    """`vllm_release("0.10.2")` -> the pristine shared tree of that real release (treat as read-only)."""
    return release_tree


@pytest.fixture
def release_copy(tmp_path: Path, vllm_release: Callable[[str], Path]) -> Callable[[str], Path]:
    """`release_copy("0.10.2")` -> a private copy of the release tree under tmp_path, safe to mutate."""

    def make(version: str) -> Path:
        vllm_release(version)
        return copy_release_tree(version, tmp_path / f"vllm-{version}")

    return make
