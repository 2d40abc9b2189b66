"""Fixtures for the image tests: paths, tool binaries, private copies of real vLLM release trees, and podman on the
images the session built (tests/support/images.py, the root conftest's `built_images`)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # make `tests.support` importable however pytest was started
    sys.path.insert(0, str(REPO))

from vllm_rocm_stack.images.podman import Podman  # noqa: E402

from tests.support.vllm_releases import SUPPORTED_VERSIONS, copy_release_tree  # noqa: E402

DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent  # the project venv: hadolint, shellcheck, ruff live next to python
DOCKERFILES = sorted(DOCKER.glob("**/Dockerfile*"), key=str)
DOCKERFILES = [p for p in DOCKERFILES if not p.name.endswith(".dockerignore")]
VLLM_DOCKERFILES = [p for p in DOCKERFILES if p.parent.name == "vllm-rocm"]


def tool(name: str) -> str:
    """A pinned tool from the venv (or PATH as a fallback); skip-free: a missing tool is a failed test."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert found, f"{name} is not installed (make setup installs it into .work/venv)"
    return str(found)


@pytest.fixture
def release_copy(tmp_path: Path) -> Callable[[str], Path]:
    """`release_copy("0.10.2")` -> a private, mutable copy of that real release's minimal tree."""

    def make(version: str) -> Path:
        assert version in SUPPORTED_VERSIONS
        return copy_release_tree(version, tmp_path / f"vllm-{version}")

    return make


@pytest.fixture(scope="session")
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
