"""The project's images, built once per test session by `make images`'s command on stand-in bases (no registry here):
buildah, the project's Dockerfiles, the bake file's arguments. Shared by the container tests (tests/docker) and the
cluster tests (tests/kube), which run the same images under podman and under a kubelet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_rocm_stack.generate import gen_bake
from vllm_rocm_stack.images.build import default_targets
from vllm_rocm_stack.images.standin import cpu_release

REPO = Path(__file__).resolve().parents[2]
# A cold build (debootstrap, the vLLM wheel, the sidecar's dependencies from PyPI) took ~2.5 min on 2 busy
# cores, plus ~5 min for the CPU stand-in (its 6.6 GB layer's commit is most of it); this only stops a hung build.
BUILD_TIMEOUT = 2400
# The vLLM image of the release `make run` serves, built on a stand-in base that serves it on CPU.
CPU_TARGET = "vllm-rocm-" + cpu_release().replace(".", "_")


def _patched_target() -> str:
    """The newest prebuilt release whose series applies patches: the image whose build patches, verifies and labels
    (the default release's series may have nothing to apply)."""
    _default, specs = gen_bake().load_matrix()
    spec = [s for s in specs if s.build == "prebuilt" and s.patch_level > 0][-1]
    return spec.target


PATCHED_TARGET = _patched_target()


def build_images(out: Path) -> dict:
    """The default targets and the vLLM image of the CPU release on its serving stand-in, in one build (images no
    current build uses are removed after it). The manifest says what was built from what; a failed build fails every
    test that needs it, with the failing step and the log's tail."""
    manifest, log = out / "manifest.json", out / "build.log"
    targets = list(dict.fromkeys([*default_targets(), CPU_TARGET, PATCHED_TARGET]))
    argv = [sys.executable, "-m", "vllm_rocm_stack.images", "build", "--bases", "stand-in", "--manifest", str(manifest)]
    with open(log, "w") as fh:
        rc = subprocess.run(
            [*argv, *targets], stdout=fh, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, cwd=REPO
        ).returncode
    text = log.read_text(errors="replace")
    if rc != 0:
        pytest.fail(f"`{' '.join(argv[1:])}` failed ({rc}):\n" + "\n".join(text.splitlines()[-60:]), pytrace=False)
    data = json.loads(manifest.read_text())
    data["by_target"] = {img["target"]: img for img in data["images"]}
    data["by_dockerfile"] = {
        img["dockerfile"]: img for img in data["images"] if img["target"] in (PATCHED_TARGET, "vllm-rocm-health")
    }
    return data
