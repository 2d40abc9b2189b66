"""A real containerd on an image store of a test's own (kube_node.store_containerd), and what the node-import tests
read from it: its content, its images, the content store's size after each import step, and the tree a container
would see on an image's snapshots (mounted, as containerd mounts it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import kube_node
from tests.support.linked_import import chain_ids


@contextmanager
def started(tmp_path: Path) -> Iterator[kube_node.ImageStore]:
    """containerd on the store `tmp_path/store`; its state (sockets) in a short directory of its own: pytest's
    tmp_path can pass the 107 bytes a socket path may have (CI's run 31: containerd exited at its start)."""
    why = kube_node.refusal()
    if why:
        pytest.skip(f"this machine cannot run containerd: {why}")
    state = Path(tempfile.mkdtemp(prefix="ctrd-"))
    try:
        containerd, store = kube_node.store_containerd(state, tmp_path / "store")
        try:
            yield store
        finally:
            containerd.stop(grace=5)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def blobs_dir(store: kube_node.ImageStore) -> Path:
    return store.root / "io.containerd.content.v1.content" / "blobs" / "sha256"


def measuring_ctr(tmp_path: Path, store: kube_node.ImageStore) -> tuple[str, Path]:
    """ctr, and after each `images import` the bytes of the content store's blobs then (before the importer removes
    the step's layer blob): one line per import in the returned file."""
    record, shim = tmp_path / "blob-bytes", tmp_path / "ctr"
    shim.write_text(
        "#!/bin/sh\n"
        f'"{kube_node.CTR}" "$@"; rc=$?\n'
        f'case " $* " in *" images import "*) du -sb "{blobs_dir(store)}" | cut -f1 >> "{record}";; esac\n'
        'exit "$rc"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return str(shim), record


def content(store: kube_node.ImageStore) -> set[str]:
    return set(store.ctr("content", "ls", "-q").stdout.split())


def images(store: kube_node.ImageStore) -> set[str]:
    return set(store.ctr("images", "ls", "-q").stdout.split())


def describe(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: type and permission bits, owner, and the content's digest or the link's target."""
    out: dict[str, tuple] = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                what = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                what = os.readlink(p)
            else:
                what = ""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, what)
    return out


@contextmanager
def mounted_view(store: kube_node.ImageStore, diff_ids: list[str], tmp_path: Path) -> Iterator[Path]:
    """The image's top snapshot (the chain of `diff_ids`) mounted read-only, as containerd would mount it under a
    container: overlayfs applies the whiteouts and opaque directories."""
    key, target = f"view-{os.getpid()}-{len(diff_ids)}", tmp_path / f"view-{len(diff_ids)}"
    target.mkdir(exist_ok=True)
    (mount,) = json.loads(store.ctr("snapshots", "view", "--mounts", key, chain_ids(tuple(diff_ids))[-1]).stdout)
    try:
        opts = ",".join(mount["Options"])
        subprocess.run(["mount", "-t", mount["Type"], "-o", opts, mount["Source"], str(target)], check=True)
        try:
            yield target
        finally:
            subprocess.run(["umount", str(target)], check=True)
    finally:
        store.ctr("snapshots", "rm", key)
