"""An image from buildah's overlay storage into containerd's overlayfs snapshotter with no copy of its data: each
layer's snapshot is made of hard links to the files of buildah's own layer directory.

Both stores keep a layer as the same thing, the upper directory of an overlay mount (whiteouts as 0/0 character
devices, opaque directories by xattr), and both stack them as read-only lower directories; neither ever writes into
a committed layer. So a snapshot is `ctr snapshots prepare` on its parent, buildah's layer directory linked into it
(`cp -a --link`: files are links, directories are made with their owners, modes and xattrs) and `ctr snapshots
commit` under the layer's chain ID, which is where containerd's unpack looks for it; then the image's own config and
manifest are imported with no layer blob (layered_import.name_image). Measured on the serving stand-in (7.3 GB): the
streamed import took 147 s and ~190 CPU-s (podman tars every layer, containerd hashes and untars it) and 7.85 GB of
disk; this takes neither.

It applies when buildah's storage driver is overlay and both stores are on one filesystem (links cannot cross
one), and when buildah's layer records match the image's diff IDs; otherwise `why_not` says why and the node streams
the image (layered_import). Buildah's records are read from its storage's JSON files, which it writes whole (atomic
renames)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.layered_import import ImportFailed, Store, inspect, name_image

GC_ROOT = "containerd.io/gc.root"  # what `ctr snapshots prepare/commit` label with: kept until the image holds them
KEY_PREFIX = "vllm-rocm-link-"


@dataclass(frozen=True)
class Layers:
    """An image in buildah's storage: its config, and its layers bottom first with their diff IDs and sizes."""

    config: bytes
    diff_ids: tuple[str, ...]
    dirs: tuple[Path, ...]
    sizes: dict[str, int]


def chain_ids(diff_ids: tuple[str, ...]) -> list[str]:
    """The OCI chain IDs of a layer stack (containerd names committed snapshots by them)."""
    out: list[str] = []
    for d in diff_ids:
        out.append(d if not out else "sha256:" + hashlib.sha256(f"{out[-1]} {d}".encode()).hexdigest())
    return out


def buildah_layers(podman: Any, src: str) -> Layers | str:
    """`src`'s layers in the storage of `podman` (a vllm_rocm_stack.images.podman.Podman), or why they cannot be
    linked."""
    buildah = podman.b
    if buildah.driver != "overlay":
        return f"buildah's storage driver is {buildah.driver}, not overlay"
    image = inspect(podman, src)
    image_id, diff_ids = image.image_id.removeprefix("sha256:"), image.diff_ids
    config = buildah("inspect", "--type", "image", "--format", "{{.Config}}", src).stdout.rstrip("\n").encode()
    if hashlib.sha256(config).hexdigest() != image_id:
        return "buildah's config of the image is not the image's (its digest differs from the image ID)"
    storage = buildah.root / "storage"
    images = {i["id"]: i for i in json.loads((storage / "overlay-images" / "images.json").read_text())}
    records = {r["id"]: r for r in json.loads((storage / "overlay-layers" / "layers.json").read_text())}
    if image_id not in images:
        return f"image {image_id[:12]} is not in {storage / 'overlay-images' / 'images.json'}"
    stack: list[dict[str, Any]] = []
    layer_id = images[image_id].get("layer")
    while layer_id:
        if layer_id not in records:
            return f"layer {layer_id[:12]} is not in {storage / 'overlay-layers' / 'layers.json'}"
        stack.append(records[layer_id])
        layer_id = records[layer_id].get("parent")
    stack.reverse()
    digests = tuple(r.get("diff-digest") for r in stack)
    if digests != diff_ids:
        return f"buildah's layer records ({len(stack)}) do not match the image's {len(diff_ids)} diff IDs"
    dirs = tuple(storage / "overlay" / r["id"] / "diff" for r in stack)
    missing = [d for d in dirs if not d.is_dir()]
    if missing:
        return f"layer directories missing: {', '.join(map(str, missing))}"
    sizes = {r["diff-digest"]: int(r.get("diff-size") or 0) for r in stack}
    return Layers(config, diff_ids, dirs, sizes)


def why_not(root: Path, layers: Layers | str) -> str:
    """Why the image cannot be linked into the containerd store at `root` ("" when it can)."""
    if isinstance(layers, str):
        return layers
    existing = next(p for p in (root, *root.parents) if p.exists())  # the store is made at the node's first start
    if any(os.stat(d).st_dev != os.stat(existing).st_dev for d in layers.dirs):
        return f"buildah's storage and {root} are on different filesystems"
    return ""


def _upper(mounts: list[dict[str, Any]]) -> Path:
    """The writable directory of a prepared snapshot's mounts (a bind mount of it, or an overlay's upperdir)."""
    (mount,) = mounts
    if mount["Type"] == "bind":
        return Path(mount["Source"])
    return Path(next(o for o in mount["Options"] if o.startswith("upperdir=")).removeprefix("upperdir="))


class CannotLink(ImportFailed):
    """The files cannot be linked (another mount between them): the node streams the image instead."""


def self_binds(*paths: Path, mountinfo: str | None = None) -> list[str]:
    """The mount points above `paths` that are bind mounts of their own directory (mountinfo's root field is the
    mount point), deepest first, once per mount (one may be stacked on another at the same point). c/storage's
    overlay driver makes its home such a mount (private, while a container runs) and the kubelet its root directory:
    the files under one are the same as under its parent mount, but a hard link may not cross from one mount to
    another (EXDEV)."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        root, point = fields[3].replace("\\040", " "), fields[4].replace("\\040", " ")
        if point == "/" or root != point:
            continue
        if any(p == Path(point) or Path(point) in p.parents for p in paths):
            out.append(point)
    return sorted(out, key=lambda m: -m.count("/"))


# The copy, run in the link's own mount namespace (a test puts a wrapper here to act while it runs).
CP: tuple[str, ...] = ("cp",)
# In a mount namespace of its own (private: no mount made outside from then on reaches it): unmount each self-bind
# named before `--`, then run the rest.
_UNBIND = 'for m in "$@"; do [ "$m" = -- ] && break; umount -l "$m" || exit 1; shift; done; shift; exec "$@"'


def _link_tree(diff: Path, upper: Path) -> None:
    """`cp -a --link` of the layer directory into the snapshot's, in a mount namespace of its own with the self-bind
    mounts above them lazily unmounted (nothing outside it changes). Always in one: podman may make its self-bind
    while the copy runs (run 32: the pre-import beside the compose test failed mid-layer with EXDEV)."""
    binds = self_binds(diff, upper)
    cp = [*CP, "-a", "--link", "--", f"{diff}/.", f"{upper}/"]
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _UNBIND, "sh", *binds, "--", *cp]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        said = done.stderr.strip()[-2000:]
        if "Invalid cross-device link" in said:
            raise CannotLink(f"{diff} and {upper} are on different mounts: {said.splitlines()[-1]}")
        if "unshare failed" in said:  # not allowed a mount namespace here (no CAP_SYS_ADMIN): the node streams
            raise CannotLink(f"no mount namespace of its own for the links: {said.splitlines()[-1]}")
        raise ImportFailed(f"linking {diff} into {upper} failed: {said}")


def link(store: Store, ctr: str, ref: str, layers: Layers, what: str) -> list[str]:
    """Make the missing snapshots of `layers` from links, then name the image `ref`; the chain IDs it committed."""
    committed: list[str] = []
    present = set(store.ctr("snapshots", "ls").stdout.split())
    parent = ""
    try:
        for chain, diff in zip(chain_ids(layers.diff_ids), layers.dirs, strict=True):
            if chain not in present:
                key = KEY_PREFIX + chain.removeprefix("sha256:")
                store.ctr("snapshots", "rm", key, check=False)  # an active one a killed import left
                prepare = ["snapshots", "prepare", "--mounts", key, *([parent] if parent else [])]
                upper = _upper(json.loads(store.ctr(*prepare).stdout))
                try:
                    _link_tree(diff, upper)
                    store.ctr("snapshots", "commit", chain, key)
                except BaseException:
                    store.ctr("snapshots", "rm", key, check=False)
                    raise
                committed.append(chain)
            parent = chain
        name_image(store, ctr, ref, layers.config, layers.diff_ids, layers.sizes, what)
    finally:
        # The image holds its chain now (or nothing is to be held): the snapshots are the garbage collector's again.
        for chain in committed:
            store.ctr("snapshots", "label", chain, f"{GC_ROOT}=", check=False)
    return committed
