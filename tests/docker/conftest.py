"""Fixtures for the image tests: paths, tool binaries, private copies of real vLLM release trees, and the
images themselves, built with buildah once per session."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # make `tests.support` importable however pytest was started
    sys.path.insert(0, str(REPO))

from vllm_rocm_stack.images.build import default_targets  # noqa: E402
from vllm_rocm_stack.images.podman import Podman  # noqa: E402
from vllm_rocm_stack.images.standin import cpu_release  # noqa: E402

from tests.support.vllm_releases import SUPPORTED_VERSIONS, copy_release_tree  # noqa: E402

DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent  # the project venv: hadolint, shellcheck, ruff live next to python
DOCKERFILES = sorted(DOCKER.glob("**/Dockerfile*"), key=str)
DOCKERFILES = [p for p in DOCKERFILES if not p.name.endswith(".dockerignore")]
VLLM_DOCKERFILES = [p for p in DOCKERFILES if p.parent.name == "vllm-rocm"]
# A cold build (debootstrap, the vLLM wheel, the sidecar's dependencies from PyPI) took ~2.5 min on 2 busy
# cores, plus ~5 min for the CPU stand-in (its 6.6 GB layer's commit is most of it); this only stops a hung build.
BUILD_TIMEOUT = 2400
# The vLLM image of the release `make run` serves, built on a stand-in base that serves it on CPU.
CPU_TARGET = "vllm-rocm-" + cpu_release().replace(".", "_")


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
    # The default targets, and the vLLM image of the CPU release on its serving stand-in (the container tests),
    # in one build: images no current build uses are removed after it.
    targets = [*default_targets(), CPU_TARGET]
    argv = [
        sys.executable,
        "-m",
        "vllm_rocm_stack.images",
        "build",
        "--bases",
        "stand-in",
        "--manifest",
        str(manifest),
        *targets,
    ]
    with open(log, "w") as fh:
        rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, cwd=REPO).returncode
    text = log.read_text(errors="replace")
    if rc != 0:
        pytest.fail(f"`{' '.join(argv[1:])}` failed ({rc}):\n" + "\n".join(text.splitlines()[-60:]), pytrace=False)
    data = json.loads(manifest.read_text())
    data["by_target"] = {img["target"]: img for img in data["images"]}
    data["by_dockerfile"] = {img["dockerfile"]: img for img in data["images"] if img["target"] != CPU_TARGET}
    return data


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
