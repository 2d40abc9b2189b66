"""The node's image import by links (tests/support/linked_import.py), with real buildah on overlay and a real
containerd: a container on the node would see exactly what podman's container sees (deleted files, an emptied
directory, owners and modes), no byte of the image is copied (the snapshot's files are buildah's inodes) and no
blob is stored; the streamed import (layered_import) sees the same; and where links cannot be, it says why."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import Buildah, choose_driver
from vllm_rocm_stack.images.podman import Podman

from tests.support import image_store, images, kube_node, layered_import, linked_import
from tests.support.buildah_store import empty_store

pytestmark = pytest.mark.system  # starts containerd, mounts overlays

REF = "localhost/vllm-rocm-test/linked:1"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[kube_node.ImageStore]:
    with image_store.started(tmp_path / "node") as store:
        yield store


@pytest.fixture
def overlay(tmp_path: Path) -> Buildah:
    if shutil.which("buildah") is None:
        pytest.fail("buildah is missing: run `make setup-base` (tools/bootstrap.sh installs it)")
    if choose_driver(tmp_path / "buildah") != "overlay":
        pytest.skip("overlayfs is refused here: buildah stores on vfs, and the node streams (layered_import)")
    return Buildah(tmp_path / "buildah", driver="overlay")


def layer(buildah: Buildah, base: str, name: str, change: object) -> None:
    """A layer on `base`: `change(root)` edits the mounted container's files, then it is committed as `name`."""
    container = buildah("from", base).stdout.strip()
    try:
        root = Path(buildah("mount", container).stdout.strip())
        change(root)  # type: ignore[operator]
        buildah("umount", container)
        buildah("commit", "--quiet", container, name)
    finally:
        buildah("rm", container, check=False)


def first(root: Path) -> None:
    (root / "d").mkdir()
    for name in ("a.txt", "keep.txt", "d/x", "d/y"):
        (root / name).write_text(f"{name} in the first layer\n")
    (root / "big.bin").write_bytes(os.urandom(1_000_000))
    (root / "link").symlink_to("keep.txt")


def second(root: Path) -> None:
    (root / "a.txt").unlink()  # a whiteout
    (root / "d" / "x").unlink()
    (root / "new.txt").write_text("added in the second layer\n")


def third(root: Path) -> None:
    shutil.rmtree(root / "d")  # an opaque directory: y and x stay hidden
    (root / "d").mkdir(mode=0o750)
    (root / "d" / "z").write_text("the only file of d now\n")
    os.chown(root / "new.txt", 1234, 5678)
    os.chmod(root / "new.txt", 0o600)


@pytest.fixture
def built(overlay: Buildah) -> str:
    layer(overlay, "scratch", "localhost/vllm-rocm-test/linked-0:1", first)
    layer(overlay, "localhost/vllm-rocm-test/linked-0:1", "localhost/vllm-rocm-test/linked-1:1", second)
    layer(overlay, "localhost/vllm-rocm-test/linked-1:1", REF, third)
    return REF


def test_a_linked_image_is_what_podman_runs_with_no_byte_copied(
    tmp_path: Path, store: kube_node.ImageStore, overlay: Buildah, built: str
) -> None:
    podman = Podman(overlay, conf_dir=tmp_path / "containers")
    layers = linked_import.buildah_layers(podman, built)
    assert isinstance(layers, linked_import.Layers), layers
    assert linked_import.why_not(store.root, layers) == ""
    assert images.import_needs(podman, [built], store.root) == 0  # what the pre-import waits for room for
    ctr, record = image_store.measuring_ctr(tmp_path, store)

    made = linked_import.link(store, ctr, built, layers, built)

    assert made == linked_import.chain_ids(layers.diff_ids)
    # One import, of the config and manifest alone: no layer blob ever reached the content store.
    assert [int(n) < 100_000 for n in record.read_text().split()] == [True]
    info = json.loads(podman("image", "inspect", "--format", "json", built).stdout)[0]
    manifest = json.loads(store.ctr("content", "get", store.image_digest(built)).stdout)
    assert manifest["config"]["digest"] == "sha256:" + info["Id"]
    assert f"localhost/vllm-rocm-test/linked@{store.image_digest(built)}" in image_store.images(store)
    # What a container sees: the node's overlay of the snapshots, podman's overlay of buildah's layers.
    with overlay.mounted(built) as podmans, image_store.mounted_view(store, list(layers.diff_ids), tmp_path) as nodes:
        expected = image_store.describe(podmans)
        assert image_store.describe(nodes) == expected
    assert "a.txt" not in expected and "d/y" not in expected and "d/z" in expected
    assert expected["new.txt"][:3] == (0o100600, 1234, 5678)
    # Links, not copies: the snapshot's big file is buildah's inode.
    snapshots = store.root / "io.containerd.snapshotter.v1.overlayfs" / "snapshots"
    ours = [p for p in snapshots.glob("*/fs/big.bin")]
    assert len(ours) == 1 and ours[0].stat().st_ino == (layers.dirs[0] / "big.bin").stat().st_ino
    # The image holds its snapshots now: none is a garbage-collection root of its own.
    for chain in made:
        labels = json.loads(store.ctr("snapshots", "info", chain).stdout).get("Labels") or {}
        assert linked_import.GC_ROOT not in labels, (chain, labels)
    # Again: every snapshot exists, nothing is made.
    assert linked_import.link(store, ctr, built, layers, built) == []


def test_the_streamed_import_sees_the_same_tree(
    tmp_path: Path, store: kube_node.ImageStore, overlay: Buildah, built: str
) -> None:
    podman = Podman(overlay, conf_dir=tmp_path / "containers")
    layered_import.import_from_podman(store, kube_node.CTR, built, built, podman)
    diff_ids = json.loads(podman("image", "inspect", "--format", "json", built).stdout)[0]["RootFS"]["Layers"]
    with overlay.mounted(built) as podmans, image_store.mounted_view(store, diff_ids, tmp_path) as nodes:
        assert image_store.describe(nodes) == image_store.describe(podmans)


def test_it_says_why_it_cannot_link(tmp_path: Path, store: kube_node.ImageStore) -> None:
    vfs = empty_store(tmp_path / "vfs")
    container = vfs("from", "scratch").stdout.strip()
    try:
        vfs("commit", "--quiet", container, REF)
    finally:
        vfs("rm", container, check=False)
    why = linked_import.buildah_layers(Podman(vfs, conf_dir=tmp_path / "containers"), REF)
    assert why == "buildah's storage driver is vfs, not overlay"
    assert linked_import.why_not(store.root, why) == why


@pytest.fixture
def storage_home(overlay: Buildah) -> Path:
    """buildah's overlay driver home (storage/overlay), where c/storage puts its bind mount while containers run."""
    return overlay.root / "storage" / "overlay"


def bound(source: Path, target: Path) -> Iterator[None]:
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        subprocess.run(["mount", "--make-private", str(target)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)


def test_links_through_the_bind_mount_podman_keeps_over_its_storage(
    tmp_path: Path, store: kube_node.ImageStore, overlay: Buildah, built: str, storage_home: Path
) -> None:
    """c/storage binds its overlay home onto itself while a container runs (run 31: the pre-import beside the compose
    test failed with "Invalid cross-device link"); the files are the same, so they are linked past it."""
    podman = Podman(overlay, conf_dir=tmp_path / "containers")
    layers = linked_import.buildah_layers(podman, built)
    assert isinstance(layers, linked_import.Layers), layers
    with contextlib.contextmanager(bound)(storage_home, storage_home):
        assert str(storage_home) in linked_import.self_binds(layers.dirs[0])
        made = linked_import.link(store, kube_node.CTR, built, layers, built)
    assert made == linked_import.chain_ids(layers.diff_ids)
    with overlay.mounted(built) as podmans, image_store.mounted_view(store, list(layers.diff_ids), tmp_path) as nodes:
        assert image_store.describe(nodes) == image_store.describe(podmans)


def test_links_through_stacked_binds(
    tmp_path: Path, store: kube_node.ImageStore, overlay: Buildah, built: str, storage_home: Path
) -> None:
    """Two binds of buildah's storage on the same point (podman processes that each made theirs): each is
    unmounted in the link's namespace, not just the top one."""
    podman = Podman(overlay, conf_dir=tmp_path / "containers")
    layers = linked_import.buildah_layers(podman, built)
    assert isinstance(layers, linked_import.Layers), layers
    twice = contextlib.ExitStack()
    with twice:
        for _ in range(2):
            twice.enter_context(contextlib.contextmanager(bound)(storage_home, storage_home))
        assert linked_import.self_binds(layers.dirs[0]).count(str(storage_home)) == 2
        made = linked_import.link(store, kube_node.CTR, built, layers, built)
    assert made == linked_import.chain_ids(layers.diff_ids)


def test_a_bind_made_while_the_links_are_made_does_not_reach_them(
    tmp_path: Path,
    store: kube_node.ImageStore,
    overlay: Buildah,
    built: str,
    storage_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """podman binds its storage when a container starts, which may be while a layer is being linked (run 32: the
    pre-import failed mid-layer with EXDEV and streamed for 6 minutes). The copy's mount namespace is its own from
    its start: here the bind is made after the first copy began and before it links anything."""
    podman = Podman(overlay, conf_dir=tmp_path / "containers")
    layers = linked_import.buildah_layers(podman, built)
    assert isinstance(layers, linked_import.Layers), layers
    began, go = tmp_path / "began", tmp_path / "go"
    wrapper = tmp_path / "cp-after-go"
    wrapper.write_text(f'#!/bin/sh\ntouch {began}\nwhile [ ! -e {go} ]; do sleep 0.05; done\nexec cp "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(linked_import, "CP", (str(wrapper),))
    assert linked_import.self_binds(layers.dirs[0]) == []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        made = pool.submit(linked_import.link, store, kube_node.CTR, built, layers, built)
        try:
            while not began.exists():  # observed, not timed
                assert not made.done(), made.result()
                time.sleep(0.05)
            with contextlib.contextmanager(bound)(storage_home, storage_home):
                go.touch()
                assert made.result(timeout=600) == linked_import.chain_ids(layers.diff_ids)
        finally:
            go.touch()


def test_layers_behind_another_mount_are_refused_as_unlinkable(
    tmp_path: Path, store: kube_node.ImageStore, overlay: Buildah, built: str, storage_home: Path
) -> None:
    """A mount of other files over buildah's storage: no link crosses it, and nothing is taken from behind it (the
    node streams instead: kube_node._import); no snapshot of it stays a garbage-collection root."""
    podman = Podman(overlay, conf_dir=tmp_path / "containers")
    layers = linked_import.buildah_layers(podman, built)
    assert isinstance(layers, linked_import.Layers), layers
    elsewhere = tmp_path / "elsewhere"
    subprocess.run(["cp", "-a", str(storage_home), str(elsewhere)], check=True)  # whiteouts too
    with contextlib.contextmanager(bound)(elsewhere, storage_home):
        assert linked_import.self_binds(layers.dirs[0]) == []
        with pytest.raises(linked_import.CannotLink, match="on different mounts"):
            linked_import.link(store, kube_node.CTR, built, layers, built)
    assert built not in image_store.images(store)
    for line in store.ctr("snapshots", "ls").stdout.splitlines()[1:]:
        info = json.loads(store.ctr("snapshots", "info", line.split()[0]).stdout)
        assert linked_import.GC_ROOT not in (info.get("Labels") or {}), info


def test_self_binds_are_read_from_mountinfo() -> None:
    mountinfo = "\n".join(
        [
            "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
            "47 27 254:0 /w/buildah/storage/overlay /w/buildah/storage/overlay rw - ext4 /dev/vda rw",
            "48 27 254:0 /w/elsewhere /w/kube/containerd rw - ext4 /dev/vda rw",
            "49 27 254:0 /w/tmp/node/kubelet /w/tmp/node/kubelet rw - ext4 /dev/vda rw",
            "50 27 254:0 /w/a\\040b /w/a\\040b rw - ext4 /dev/vda rw",
        ]
    )
    diff, upper = Path("/w/buildah/storage/overlay/1/diff"), Path("/w/kube/containerd/snapshots/1/fs")
    assert linked_import.self_binds(diff, upper, mountinfo=mountinfo) == ["/w/buildah/storage/overlay"]
    stacked = mountinfo + "\n51 47 254:0 /w/buildah/storage/overlay /w/buildah/storage/overlay rw - ext4 /dev/vda rw"
    assert linked_import.self_binds(diff, mountinfo=stacked) == ["/w/buildah/storage/overlay"] * 2
    assert linked_import.self_binds(Path("/w/a b/c"), mountinfo=mountinfo) == ["/w/a b"]
    assert linked_import.self_binds(Path("/w/other"), mountinfo=mountinfo) == []
