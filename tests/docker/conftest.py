"""Fixtures for the image tests: private copies of real vLLM release trees, and podman on the images the session built
(tests/support/images.py, the root conftest's `built_images`). Paths and tools: tests/support/repo.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.images.podman import Podman

from tests.support import tiers
from tests.support.vllm_releases import SUPPORTED_VERSIONS, copy_release_tree


@pytest.fixture
def release_copy(tmp_path: Path) -> Callable[[str], Path]:
    """`release_copy("0.10.2")` -> a private, mutable copy of that real release's minimal tree."""

    def make(version: str) -> Path:
        assert version in SUPPORTED_VERSIONS
        return copy_release_tree(version, tmp_path / f"vllm-{version}")

    return make


@pytest.fixture(scope="session")
@tiers.needs("system", "runs containers with podman")
def podman(built_images: dict) -> Iterator[Podman]:
    """podman with the image builds' storage (vllm_rocm_stack.images.podman). Skipped, with what failed, only where
    this machine refuses to run a container; a missing tool is a failure. Whatever a test leaves (containers,
    volumes, networks) is removed at the start and the end of the session."""
    p = Podman()
    why = p.refusal(built_images["by_target"]["vllm-rocm-health"]["image"])
    if why.startswith("`podman run"):
        pytest.skip(f"this machine refuses to run containers: {why}")
    assert not why, why
    p.remove_everything()
    yield p
    p.remove_everything()
