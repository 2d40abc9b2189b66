"""The node's background image import (tests/support/kube_node.py, Preimport) with a real containerd on a store of its
own: it imports what is not current and nothing twice, says so, and a failure is reported in words (the node's start
then imports instead) with no containerd left running either way."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.support import kube_node

pytestmark = pytest.mark.system  # starts containerd


def containerds(state: Path) -> list[int]:
    """The pids of containerd processes run with this state directory's config."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(state).encode() in arg for arg in cmdline) and b"containerd" in cmdline[0]:
            out.append(int(pid))
    return out


@pytest.fixture
def node_binaries() -> None:
    why = kube_node.refusal()
    if why:
        pytest.skip(f"this machine cannot run containerd: {why}")
    lacking = [p for p in (kube_node.CONTAINERD, kube_node.CTR) if not Path(p).exists()]
    if lacking:
        pytest.fail(f"missing (run `make setup`): {lacking}")


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tiny_oci_archive(path: Path, ref: str) -> Path:
    """An OCI image archive of one small layer, named `ref`, laid out as `buildah push oci-archive:` writes the
    Kubernetes build's pause.tar: so that these tests need neither that build nor the session's images."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[f"blobs/sha256/{digest[7:]}"] = data
        return {"digest": digest, "size": len(data)}

    layer = blob(_tar({"hello.txt": b"a layer of the node pre-import test\n"}))
    config = blob(
        json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Entrypoint": ["/hello"]},
                "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
            }
        ).encode()
    )
    manifest = blob(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
            }
        ).encode()
    )
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest,
                "annotations": {"org.opencontainers.image.ref.name": ref},
            }
        ],
    }
    files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": json.dumps(index).encode(), **blobs}
    path.write_bytes(_tar(files))
    return path


def test_imports_what_is_not_current_and_stops_its_containerd(tmp_path: Path, node_binaries: None) -> None:
    root, ref = tmp_path / "store", "localhost/vllm-rocm-test/tiny:1"
    images = {ref: str(tiny_oci_archive(tmp_path / "tiny.tar", ref))}
    first = kube_node.Preimport(images, tmp_path / "one", root).start()
    said = first.wait()
    assert first.error == "" and f"import {ref} (imported)" in first.timings, said
    assert "pre-imported in" in said and containerds(tmp_path / "one") == []
    assert ref in json.loads((root / "imports.json").read_text())
    # The same source again: current, nothing imported.
    again = kube_node.Preimport(images, tmp_path / "two", root).start()
    assert "all current" in again.wait() and again.timings == {} and containerds(tmp_path / "two") == []


def test_a_failed_import_is_said_and_leaves_nothing_running(tmp_path: Path, node_binaries: None) -> None:
    root = tmp_path / "store"
    pre = kube_node.Preimport({"localhost/none:1": "podman:localhost/vllm-rocm-no-such-image:1"}, tmp_path / "s", root)
    said = pre.start().wait()
    assert pre.error and said.startswith("the pre-import failed after") and "the node imports instead" in said, said
    assert containerds(tmp_path / "s") == []
    assert not (root / "imports.json").exists() or "localhost/none:1" not in (root / "imports.json").read_text()
