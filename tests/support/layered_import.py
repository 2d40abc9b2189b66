"""An image from podman's storage into containerd one layer at a time, so that the disk holds at most one layer blob
beside the unpacked snapshots: the node's import where its snapshots cannot be linked to buildah's layer files
(linked_import.py: buildah on vfs, another filesystem or mount). `ctr images import` of the whole image writes every
layer blob before it unpacks any, and the blobs are dropped only afterwards: the serving stand-in's 7.3 GB of
uncompressed layers twice at once, which was the peak of a fresh CI run's disk (0.8 GB to spare on CI's disk, run
29). Layer by layer, the transient is the largest layer (3.3 GB).

How (containerd 1.6: `rootfs.ApplyLayerWithOpts` skips a layer whose snapshot, by chain ID, exists, without reading
its blob): `podman save --format docker-archive` streams the layers uncompressed, in order. Layer k goes to
`ctr images import` as an OCI layout of its own: a manifest of layers 0..k, a config naming their diff IDs, and blob
k alone. The unpack applies layer k only; its blob is removed after. When the stream ends, the image's own config
and a manifest of all its layers are imported with no layer blob (every snapshot exists): containerd keeps the
image podman has, its config digest podman's image ID. The step images hold their snapshots against containerd's
garbage collector until then, and are removed last."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
# containerd names an image from an index entry's annotation (client.Import's imageName).
NAME = "io.containerd.image.name"
# The step images' repository: one per store, removed at the end of each import (and at the start of the next, after
# an import that was killed).
STEP_REPO = "localhost/vllm-rocm-layered-import"
_LAYER_FILE = re.compile(r"^([0-9a-f]{64})\.tar$")
_CONFIG_FILE = re.compile(r"^([0-9a-f]{64})\.json$")
_COPY = 1 << 20

log = logging.getLogger(__name__)


class Store(Protocol):
    socket: Path
    root: Path

    def ctr(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]: ...


class ImportFailed(RuntimeError):
    pass


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _write(out: IO[bytes], name: str, size: int, src: IO[bytes]) -> None:
    """One regular file of a tar stream, copied in large chunks (tarfile's streaming writer re-buffers every write)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    out.write(info.tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape"))
    left = size
    while left:
        chunk = src.read(min(_COPY, left))
        if not chunk:
            raise ImportFailed(f"{name}: the stream ended {left} bytes short")
        out.write(chunk)
        left -= len(chunk)
    out.write(b"\0" * (-size % tarfile.BLOCKSIZE))


class Step:
    """One `ctr images import` of an OCI layout written into its stdin as a tar stream."""

    def __init__(self, store: Store, ctr: str, args: Sequence[str]) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [ctr, "-a", str(store.socket), "-n", "k8s.io", "images", "import", *args, "-"],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        assert self.proc.stdin is not None
        self.out: IO[bytes] = self.proc.stdin

    def layer(self, digest: str, size: int, data: IO[bytes]) -> None:
        _write(self.out, f"blobs/sha256/{digest.removeprefix('sha256:')}", size, data)

    def blob(self, data: bytes) -> None:
        _write(self.out, f"blobs/sha256/{_digest(data)[7:]}", len(data), io.BytesIO(data))

    def finish(self, manifest: bytes, name: str, what: str) -> None:
        """The manifest, the layout's index naming it `name`, the tar's end; then ctr's verdict."""
        self.blob(manifest)
        desc = {"mediaType": MANIFEST, "digest": _digest(manifest), "size": len(manifest), "annotations": {NAME: name}}
        for file, data in (
            ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
            ("index.json", json.dumps({"schemaVersion": 2, "manifests": [desc]}).encode()),
        ):
            _write(self.out, file, len(data), io.BytesIO(data))
        try:
            self.out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
            self.out.close()
        except BrokenPipeError:
            pass  # ctr stopped reading: its exit status and output say why
        rc = self.proc.wait(timeout=3600)
        self.log.seek(0)
        out = self.log.read().decode(errors="replace").strip()
        self.log.close()
        if rc != 0:
            raise ImportFailed(f"ctr images import of {what} failed ({rc}): {out[-2000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def manifest_json(config: bytes, diff_ids: Sequence[str], sizes: Mapping[str, int]) -> bytes:
    layers = [{"mediaType": LAYER, "digest": d, "size": sizes[d]} for d in diff_ids]
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": _digest(config), "size": len(config)},
            "layers": layers,
        }
    ).encode()


def name_image(
    store: Store, ctr: str, ref: str, config: bytes, diff_ids: Sequence[str], sizes: Mapping[str, int], what: str
) -> None:
    """The image itself, once every layer is unpacked: its own config and a manifest of all its layers, no layer
    blob. Named `ref` and `<repo>@<manifest digest>` (`--digests`: what a pod spec's `repo@sha256:...` resolves);
    the unpack finds every snapshot and labels the config with the top one, which holds the chain against the
    garbage collector."""
    repo = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    step = Step(store, ctr, ["--base-name", repo, "--digests"])
    try:
        step.blob(config)
        step.finish(manifest_json(config, diff_ids, sizes), ref, what)
    except BaseException:
        step.kill()
        raise


def collect_garbage(store: Store, image: str) -> None:
    """Run containerd's garbage collection now and wait for it. `ctr content rm` only unlists a blob: its file goes
    at the next collection, which containerd 1.6 starts after 100 changes, not after a deletion (one run in four of
    tests/kube/test_layered_import.py saw two layer blobs at once without this). A removal with `--sync` is the one
    way ctr has to ask for one: of a second name given to `image` for the purpose."""
    name = f"{STEP_REPO}:collect"
    store.ctr("images", "tag", "--force", image, name)
    store.ctr("images", "rm", "--sync", name)


def remove_step_images(store: Store) -> None:
    """The step images an import left (a killed one's included): their snapshots are then the final image's only.
    Synchronously: the garbage collection they start is over when this returns, so that it cannot remove a snapshot
    that a later step found and skipped before that step's image holds it."""
    names = [n for n in store.ctr("images", "ls", "-q").stdout.split() if n.startswith(STEP_REPO + ":")]
    if names:
        store.ctr("images", "rm", "--sync", *names)


@dataclass(frozen=True)
class Image:
    """What the import checks the stream against: the layers' diff IDs in order, the config's digest (podman's image
    ID), and the platform the step configs name (containerd's unpack matches it against the host's)."""

    diff_ids: tuple[str, ...]
    image_id: str
    architecture: str = "amd64"
    os: str = "linux"


def inspect(podman: Any, src: str) -> Image:
    """What podman says of its image `src` (a vllm_rocm_stack.images.podman.Podman)."""
    info = json.loads(podman("image", "inspect", "--format", "json", src).stdout)[0]
    return Image(
        tuple(info["RootFS"]["Layers"]),
        "sha256:" + info["Id"].removeprefix("sha256:"),
        info.get("Architecture") or "amd64",
        info.get("Os") or "linux",
    )


def import_from_podman(store: Store, ctr: str, ref: str, src: str, podman: Any) -> None:
    """Import podman's image `src` into `store` as `ref` (and `<repo>@<manifest digest>`, as `ctr images import
    --digests` names it: what a pod spec's `repo@sha256:...` resolves), one layer at a time; no layer blob stays.
    `podman` is a vllm_rocm_stack.images.podman.Podman."""
    image = inspect(podman, src)
    with tempfile.TemporaryFile() as err:
        save = subprocess.Popen(
            ["podman", "save", "--format", "docker-archive", src], stdout=subprocess.PIPE, stderr=err, env=podman.env
        )
        assert save.stdout is not None

        def saved() -> None:
            if save.wait(timeout=60) != 0:
                err.seek(0)
                said = err.read().decode(errors="replace").strip()
                raise ImportFailed(f"podman save of {src} failed ({save.returncode}): {said[-2000:]}")

        try:
            import_stream(store, ctr, ref, save.stdout, image, f"podman save of {src}", saved)
        finally:
            save.stdout.close()
            if save.poll() is None:
                save.kill()
            save.wait()


def import_stream(
    store: Store, ctr: str, ref: str, stream: IO[bytes], image: Image, what: str, saved: Callable[[], None]
) -> None:
    """Import the docker-archive `stream` (`what`, in errors) of `image` as `ref`, layer by layer; `saved()` raises
    when the stream's writer failed, checked before the image itself is named."""
    if not image.diff_ids:
        raise ImportFailed(f"{what}: the image has no layers")
    remove_step_images(store)
    run = _Run(store, ctr, image, what)
    try:
        run.layers(stream)
        saved()
        run.commit(ref)
    except BaseException:
        run.abort()
        try:  # what it left: the next import would redo those layers anyway
            run.clean()
        except Exception as cleanup:  # the import's own error is the one to see
            log.warning("%s: removing what the failed import left failed too: %s", what, cleanup)
        raise
    run.clean()


class _Run:
    def __init__(self, store: Store, ctr: str, image: Image, what: str) -> None:
        self.store, self.ctr, self.image, self.what = store, ctr, image, what
        self.sizes: dict[str, int] = {}  # the layers that came, and their sizes
        self.last_use = {d: i for i, d in enumerate(image.diff_ids)}
        self.dropped: set[str] = set()
        self.done = 0  # the layers whose snapshot exists
        self.config: bytes | None = None
        self.step: Step | None = None

    def layers(self, stream: IO[bytes]) -> None:
        ids = self.image.diff_ids
        with tarfile.open(fileobj=stream, mode="r|", bufsize=_COPY) as archive:
            for member in archive:
                if not member.isfile():
                    continue  # the legacy layout's directories and its links to the layer files
                if _CONFIG_FILE.match(member.name):
                    f = archive.extractfile(member)
                    assert f is not None
                    self.config = f.read()
                    if _digest(self.config) != self.image.image_id:
                        raise ImportFailed(f"{self.what} streamed a config that is not image {self.image.image_id}")
                    continue
                m = _LAYER_FILE.match(member.name)
                if not m:
                    continue  # manifest.json, repositories, the legacy layout's VERSION and json files
                digest = "sha256:" + m.group(1)
                if self.done >= len(ids) or ids[self.done] != digest:
                    expected = ids[self.done] if self.done < len(ids) else "no more layers"
                    raise ImportFailed(
                        f"{self.what} streamed layer {digest} where {expected} was due (layer {self.done + 1} of "
                        f"{len(ids)}): the layers must come in order"
                    )
                self.sizes[digest] = member.size
                self._unpack(archive.extractfile(member), member.size)
                # A layer repeated further up the image: its blob stays in the store until its last use.
                while self.done < len(ids) and ids[self.done] in self.sizes:
                    self._unpack(None, 0)
                self._drop_spent()
        if self.done != len(ids) or self.config is None:
            raise ImportFailed(
                f"{self.what} streamed {self.done} of the image's {len(ids)} layers"
                + ("" if self.config is not None else " and no config")
            )

    def _unpack(self, data: IO[bytes] | None, size: int) -> None:
        """The step of layer `done`: a manifest and config of the layers up to it, its blob when `data` is given
        (else the blob is in the store already: a repeated layer)."""
        k = self.done
        part = self.image.diff_ids[: k + 1]
        config = json.dumps(
            {
                "architecture": self.image.architecture,
                "os": self.image.os,
                "rootfs": {"type": "layers", "diff_ids": part},
            }
        ).encode()
        self.step = Step(self.store, self.ctr, [])
        if data is not None:
            self.step.layer(part[-1], size, data)
        self.step.blob(config)
        self.step.finish(
            manifest_json(config, part, self.sizes),
            f"{STEP_REPO}:{k}",
            f"{self.what}, layer {k + 1} of {len(self.image.diff_ids)}",
        )
        self.step = None
        self.done += 1

    def _drop_spent(self) -> None:
        spent = sorted(d for d in self.sizes if self.last_use[d] < self.done and d not in self.dropped)
        if spent:
            self.store.ctr("content", "rm", *spent)
            self.dropped.update(spent)
            collect_garbage(self.store, f"{STEP_REPO}:{self.done - 1}")

    def commit(self, ref: str) -> None:
        assert self.config is not None
        name_image(self.store, self.ctr, ref, self.config, self.image.diff_ids, self.sizes, self.what)

    def abort(self) -> None:
        if self.step is not None:
            self.step.kill()

    def clean(self) -> None:
        """No layer blob of this image and no step image stays."""
        present = set(self.store.ctr("content", "ls", "-q").stdout.split())
        left = sorted(d for d in set(self.image.diff_ids) - self.dropped if d in present)
        if left:
            self.store.ctr("content", "rm", *left)
        remove_step_images(self.store)
