"""The project's images, built once per test session by `make images`'s command on stand-in bases (no registry here):
buildah, the project's Dockerfiles, the bake file's arguments. Shared by the container tests (tests/docker) and the
cluster tests (tests/kube), which run the same images under podman and under a kubelet."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from vllm_rocm_stack import cpu_wheelhouse, kube_build
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.images.build import cpu_target, patched_target, suite_targets
from vllm_rocm_stack.images.standin import cpu_build_needs

from tests.support import kube_node, linked_import
from tests.support.terminal import say

REPO = Path(__file__).resolve().parents[2]
# A cold build (debootstrap, the vLLM wheel, the sidecar's dependencies from PyPI) took ~2.5 min on 2 busy
# cores, plus ~5 min for the CPU stand-in (its 6.6 GB layer's commit is most of it); this only stops a hung build.
BUILD_TIMEOUT = 2400
# The vLLM image of the release `make run` serves, built on a stand-in base that serves it on CPU.
CPU_TARGET = cpu_target()
PATCHED_TARGET = patched_target()
# The lines of a failed build's log that say why, best first: the disk running out, buildah's or pip's error, a
# command that failed.
_REASONS = (re.compile(r"[Nn]o space left"), re.compile(r"(^Error: |\berror: )"), re.compile(r"\bfailed \(\d+\)"))


# What the images leave room for, beyond the serving stand-in's build, while the Kubernetes build runs: its Go caches
# (up to kube_build.GO_CACHE_PEAK) and, after the images, the node's import (`import_needs`: nothing when its
# snapshots are linked to buildah's layer files, else the image's snapshots and its largest layer's blob), which comes
# while the compose test runs. Measured with CI's ~33.5 GB free, when the import still held every layer blob at once
# (the image twice): waiting for the build whenever less than 6 GB was left besides (run 26) imported with 0.9 GB to
# spare, after the images had waited 14 min; building at once (run 27) left the import 1 GB short. Streamed layer by
# layer (run 30, 2 GB spare: built at once) the lowest was 3.0 GB free.
IMAGES_SPARE_BYTES = 2_000_000_000


def _make_room_for_the_serving_stand_in(config: pytest.Config | None) -> None:
    """A run that trims its caches (CI: VLLM_ROCM_TRIM_CACHES=1) removes the Kubernetes build's Go caches when the
    build ends. The serving stand-in's build needs room at once (standin.cpu_build_needs); when the disk has less
    than that plus IMAGES_SPARE_BYTES, wait for the build to end rather than fail for want of space (it happened:
    CI's machine had ~35 GB free)."""
    if os.environ.get(cpu_wheelhouse.TRIM_ENV) != "1" or not kube_build.running():
        return
    free, need = shutil.disk_usage(WORK).free, cpu_build_needs() + IMAGES_SPARE_BYTES
    if free < need:
        say(
            config,
            f"images: {free / 1e9:.1f} GB free, the builds want {need / 1e9:.1f} GB while the Kubernetes build "
            "runs: waiting for it to end and remove its Go caches",
        )
        t0 = time.monotonic()
        kube_build.wait()
        free = shutil.disk_usage(WORK).free
        say(config, f"images: {free / 1e9:.1f} GB free after {time.monotonic() - t0:.0f} s, building")


def _reason(log_text: str) -> str:
    """The line of a build log that says best why it failed ("" if none does)."""
    lines = log_text.splitlines()
    for pattern in _REASONS:
        found = [line.strip() for line in lines if pattern.search(line)]
        if found:
            return found[-1]
    return ""


def build_images(out: Path, config: pytest.Config | None = None) -> dict:
    """The default targets and the vLLM image of the CPU release on its serving stand-in, in one build (images no
    current build uses are removed after it). The manifest says what was built from what; a failed build fails every
    test that needs it, with the failing step and the log's tail."""
    manifest, log = out / "manifest.json", out / "build.log"
    targets = suite_targets()
    _make_room_for_the_serving_stand_in(config)
    argv = [sys.executable, "-m", "vllm_rocm_stack.images", "build", "--bases", "stand-in", "--manifest", str(manifest)]
    with open(log, "w") as fh:
        rc = subprocess.run(
            [*argv, *targets], stdout=fh, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, cwd=REPO
        ).returncode
    text = log.read_text(errors="replace")
    if rc != 0:
        free = shutil.disk_usage(WORK).free / 1e9
        # The reason on the first line: a test summary shows only that one.
        pytest.fail(
            f"the image build failed ({rc}; {free:.1f} GB free): {_reason(text)}\n`{' '.join(argv[1:])}`; "
            f"log {log}:\n" + "\n".join(text.splitlines()[-60:]),
            pytrace=False,
        )
    data = json.loads(manifest.read_text())
    data["by_target"] = {img["target"]: img for img in data["images"]}
    data["by_dockerfile"] = {
        img["dockerfile"]: img for img in data["images"] if img["target"] in (PATCHED_TARGET, "vllm-rocm-health")
    }
    return data


# The images the node tests run, as the node imports them: reference -> `podman:<reference>`.
NODE_TARGETS = (CPU_TARGET, "vllm-rocm-health")
PREIMPORT = pytest.StashKey[kube_node.Preimport]()


def node_images(built: dict) -> dict[str, str]:
    refs = [built["by_target"][target]["image"] for target in NODE_TARGETS]
    return {ref: "podman:" + ref for ref in refs}


def import_needs(podman: Any, refs: list[str], root: Path) -> int:
    """The disk the node's import of `refs` into the containerd store at `root` takes: nothing for an image whose
    snapshots are linked to buildah's layer files (tests/support/linked_import.py); for one that is streamed
    (layered_import.py), its unpacked layers, and one layer blob at a time beside them, the largest."""
    total, largest = 0, 0
    for ref in refs:
        if not linked_import.why_not(root, linked_import.buildah_layers(podman, ref)):
            continue
        total += int(podman("image", "inspect", "--format", "{{.Size}}", ref).stdout)
        history = json.loads(podman("history", "--format", "json", ref).stdout)
        largest = max([largest, *(int(entry.get("size") or 0) for entry in history)])
    return total + largest


def start_node_preimport(request: pytest.FixtureRequest, built: dict) -> kube_node.Preimport | None:
    """Start importing the node's images into its kept containerd store in the background (kube_node.Preimport),
    when this session will start the node and the disk has room for the import beside what the Kubernetes build's Go
    caches may still take; the node's start waits for it (`wait_node_preimport`). Otherwise the node imports at its
    start, as it did before."""
    config = request.config
    if not any("node_cluster" in getattr(item, "fixturenames", ()) for item in request.session.items):
        return None
    if kube_node.refusal() or not all(Path(p).exists() for p in (kube_node.CONTAINERD, kube_node.CTR)):
        return None
    from vllm_rocm_stack.images.podman import Podman

    images = node_images(built)
    try:
        image_need = import_needs(Podman(), list(images), kube_node.CONTAINERD_ROOT)
    except Exception as e:  # only a head start is lost: the node imports at its start, and fails there if it must
        say(config, f"node images: their sizes are unknown ({e}): the node imports them at its start")
        return None
    need = image_need + kube_build.go_cache_growth_left()
    free = shutil.disk_usage(WORK).free
    room = None
    if free < need:
        if not kube_build.running():
            say(config, f"node images: {free / 1e9:.1f} GB free, the import wants {need / 1e9:.1f} GB: "
                        "the node imports them at its start")  # fmt: skip
            return None
        # The build's end frees its Go caches: import in the background then, still before the node's start.
        say(
            config,
            f"node images: {free / 1e9:.1f} GB free, the import wants {need / 1e9:.1f} GB while the Kubernetes "
            "build runs: importing in the background once it has ended and removed its Go caches",
        )
        room = functools.partial(room_after_the_build, image_need)
    (WORK / "tmp").mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="preimport-", dir=WORK / "tmp"))
    if room is None:
        say(config, f"node images: importing {', '.join(images)} into the node's store in the background")
    pre = kube_node.Preimport(images, state, room=room).start()
    config.stash[PREIMPORT] = pre
    return pre


def room_after_the_build(need: int, lock: Path = kube_build.LOCK, cache: Path | None = None) -> str:
    """Wait for the Kubernetes build to end and for the removal of the Go caches it renamed aside (build.sh removes
    them in the background), then say whether `need` bytes are free: "" if they are, else why not."""
    kube_build.wait(lock)
    kube_build.wait_for_trims(cache)
    free = shutil.disk_usage(WORK).free
    if free < need:
        return f"{free / 1e9:.1f} GB free after the Kubernetes build, the import wants {need / 1e9:.1f} GB"
    return ""


def wait_node_preimport(config: pytest.Config) -> None:
    """Wait for the background import, if one was started, and say what it did; its state directory goes."""
    pre = config.stash.get(PREIMPORT, None)
    if pre is None:
        return
    say(config, "node images: " + pre.wait())
    del config.stash[PREIMPORT]
    shutil.rmtree(pre.state, ignore_errors=True)
