"""Fixtures for the image tests: paths, tool binaries, private copies of real vLLM release trees, and the
images themselves, built with buildah once per session."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # make `tests.support` importable however pytest was started
    sys.path.insert(0, str(REPO))

from tests.support.vllm_releases import SUPPORTED_VERSIONS, copy_release_tree  # noqa: E402

DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent  # the project venv: hadolint, shellcheck, ruff live next to python
DOCKERFILES = sorted(DOCKER.glob("**/Dockerfile*"), key=str)
DOCKERFILES = [p for p in DOCKERFILES if not p.name.endswith(".dockerignore")]
VLLM_DOCKERFILES = [p for p in DOCKERFILES if p.parent.name == "vllm-rocm"]
# A cold build (debootstrap, the vLLM wheel, the sidecar's dependencies from PyPI) took ~2.5 min on 2 busy
# cores; this only stops a hung build.
BUILD_TIMEOUT = 1500


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
def built_images(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both images, built once per session by `make images`'s command on stand-in bases (no registry here):
    buildah, the project's Dockerfiles, the bake file's arguments. The manifest says what was built from what;
    a failed build fails every test that needs it, with the failing step and the log's tail."""
    out = tmp_path_factory.mktemp("images")
    manifest, log = out / "manifest.json", out / "build.log"
    argv = [sys.executable, "-m", "vllm_rocm_stack.images", "build", "--bases", "stand-in", "--manifest", str(manifest)]
    with open(log, "w") as fh:
        rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, cwd=REPO).returncode
    text = log.read_text(errors="replace")
    if rc != 0:
        pytest.fail(f"`{' '.join(argv[1:])}` failed ({rc}):\n" + "\n".join(text.splitlines()[-60:]), pytrace=False)
    data = json.loads(manifest.read_text())
    data["by_dockerfile"] = {img["dockerfile"]: img for img in data["images"]}
    return data
