"""The node's import of an image from podman's storage, one layer at a time (tests/support/layered_import.py), into a
real containerd on a store of the test's own: the image arrives whole (its config is podman's image ID, every layer's
files are in its snapshots, a pod spec's `repo@sha256:` name resolves), the content store never holds more than one
layer blob, and none stays; a stream it cannot trust is refused and leaves nothing behind."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.images.podman import Podman

from tests.support import image_store, kube_node, layered_import
from tests.support.buildah_store import empty_store

pytestmark = pytest.mark.system  # starts containerd


@pytest.fixture
def store(tmp_path: Path) -> Iterator[kube_node.ImageStore]:
    with image_store.started(tmp_path) as store:
        yield store


def layer_files(store: kube_node.ImageStore, diff_ids: list[str], tmp_path: Path) -> dict[str, bytes]:
    """The regular files a container would see on the image's snapshots."""
    with image_store.mounted_view(store, diff_ids, tmp_path) as root:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_podman_image_arrives_whole_holding_one_layer_blob_at_a_time(
    tmp_path: Path, store: kube_node.ImageStore
) -> None:
    buildah = empty_store(tmp_path / "buildah")
    podman = Podman(buildah, conf_dir=tmp_path / "containers")
    ref = "localhost/vllm-rocm-test/layered:1"
    # Three layers of incompressible data, of different sizes, and a file the top layer replaces.
    sizes = {"a.bin": 3_000_000, "b.bin": 5_000_000, "c.bin": 2_000_000}
    expected: dict[str, bytes] = {}
    image = "scratch"
    for i, (name, size) in enumerate(sizes.items()):
        src = tmp_path / f"layer{i}"
        src.mkdir()
        expected[name] = os.urandom(size)
        # Of another size in each layer: buildah's vfs diffs a layer by size and mtime, and `buildah copy` keeps
        # the source's mtime, which two quick writes can share (the kernel's clock is coarse).
        expected["which"] = f"layer {i}\n".encode() * (i + 1)
        (src / name).write_bytes(expected[name])
        (src / "which").write_bytes(expected["which"])
        container = buildah("from", image).stdout.strip()
        try:
            buildah("copy", container, f"{src}/", "/")
            image = f"localhost/vllm-rocm-test/layered-{i}:1"
            buildah("commit", "--quiet", container, ref if i == len(sizes) - 1 else image)
        finally:
            buildah("rm", container, check=False)
    info = json.loads(podman("image", "inspect", "--format", "json", ref).stdout)[0]
    diff_ids = info["RootFS"]["Layers"]
    assert len(diff_ids) == 3

    ctr, record = image_store.measuring_ctr(tmp_path, store)
    layered_import.import_from_podman(store, ctr, ref, ref, podman)

    # One step per layer and the image's own; the store never held more than the largest layer (plus a few small
    # JSON documents), where a whole import holds all three.
    steps = [int(line) for line in record.read_text().split()]
    assert len(steps) == 4, steps
    assert max(steps) < max(sizes.values()) + 1_000_000 < sum(sizes.values()), steps
    # The image podman has, under its name and its digest name; no layer blob and no step image stays.
    manifest_digest = store.image_digest(ref)
    manifest = json.loads(store.ctr("content", "get", manifest_digest).stdout)
    assert manifest["config"]["digest"] == "sha256:" + info["Id"]
    assert [layer["digest"] for layer in manifest["layers"]] == diff_ids
    assert f"localhost/vllm-rocm-test/layered@{manifest_digest}" in image_store.images(store)
    assert not any(n.startswith(layered_import.STEP_REPO) for n in image_store.images(store))
    assert not image_store.content(store) & set(diff_ids)
    files = layer_files(store, diff_ids, tmp_path)
    assert files == expected

    # Importing again (another build of the same image) finds its snapshots: nothing is written twice.
    record.unlink()
    layered_import.import_from_podman(store, ctr, ref, ref, podman)
    assert max(int(line) for line in record.read_text().split()) < max(sizes.values()) + 1_000_000
    assert store.image_digest(ref) == manifest_digest


def _tar(files: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def docker_archive(layers: list[bytes], order: list[int] | None = None) -> tuple[bytes, layered_import.Image]:
    """A docker-archive as `podman save` writes it (layer files by their digest, the config, manifest.json) of an
    image whose layers are `layers` (a repeated one stored once); `order`: which layers it streams, in what order."""
    diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    distinct = [i for i, d in enumerate(diff_ids) if diff_ids.index(d) == i]
    files = [(diff_ids[i][7:] + ".tar", layers[i]) for i in (distinct if order is None else order)]
    manifest = [{"Config": config_name, "RepoTags": [], "Layers": [d[7:] + ".tar" for d in diff_ids]}]
    files += [(config_name, config), ("manifest.json", json.dumps(manifest).encode())]
    return _tar(files), layered_import.Image(tuple(diff_ids), "sha256:" + config_name.removesuffix(".json"))


def layer(files: dict[str, bytes]) -> bytes:
    return _tar(list(files.items()))


def ok() -> None:
    pass


def test_a_layer_repeated_in_the_image_is_streamed_once_and_unpacked_twice(
    tmp_path: Path, store: kube_node.ImageStore
) -> None:
    a, b = layer({"x": b"first\n"}), layer({"x": b"second\n"})
    stream, image = docker_archive([a, b, a])
    ref = "localhost/vllm-rocm-test/repeated:1"
    layered_import.import_stream(store, kube_node.CTR, ref, io.BytesIO(stream), image, "the test's archive", ok)
    assert layer_files(store, list(image.diff_ids), tmp_path) == {"x": b"first\n"}
    assert not image_store.content(store) & set(image.diff_ids)
    assert not any(n.startswith(layered_import.STEP_REPO) for n in image_store.images(store))


def failed(what: str) -> None:
    raise layered_import.ImportFailed(what)


@pytest.mark.parametrize(
    "case, saved, match",
    [
        ("out of order", ok, "must come in order"),
        ("wrong config", ok, "a config that is not image"),
        ("writer failed", lambda: failed("podman save failed (125): gone"), "podman save failed"),
        ("short", ok, "streamed 1 of the image's 2 layers"),
    ],
)
def test_a_stream_it_cannot_trust_is_refused_and_leaves_nothing(
    tmp_path: Path, store: kube_node.ImageStore, case: str, saved: object, match: str
) -> None:
    a, b = layer({"a": b"a\n"}), layer({"b": b"b\n"})
    stream, image = docker_archive([a, b], order={"out of order": [1, 0], "short": [0]}.get(case))
    if case == "wrong config":
        image = layered_import.Image(image.diff_ids, "sha256:" + "0" * 64)
    ref = "localhost/vllm-rocm-test/refused:1"
    with pytest.raises(layered_import.ImportFailed, match=match):
        layered_import.import_stream(store, kube_node.CTR, ref, io.BytesIO(stream), image, "the archive", saved)  # type: ignore[arg-type]
    assert ref not in image_store.images(store)
    assert not any(n.startswith(layered_import.STEP_REPO) for n in image_store.images(store))
    assert not image_store.content(store) & set(image.diff_ids)
