"""The node's background image import (tests/support/kube_node.py, Preimport) with a real containerd on a store of its
own: it imports what is not current and nothing twice, says so, and a failure is reported in words (the node's start
then imports instead) with no containerd left running either way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vllm_rocm_stack import kube_build

from tests.support import kube_node

pytestmark = [pytest.mark.system, pytest.mark.node]  # starts containerd


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
    kube_build.wait()  # pause.tar is the Kubernetes build's
    lacking = [
        p for p in (kube_node.CONTAINERD, kube_node.CTR, str(kube_node.IMAGES / "pause.tar")) if not Path(p).exists()
    ]
    if lacking:
        pytest.fail(f"missing (run `make setup`): {lacking}")


def test_imports_what_is_not_current_and_stops_its_containerd(tmp_path: Path, node_binaries: None) -> None:
    root, ref = tmp_path / "store", kube_node.pause_image()
    images = {ref: str(kube_node.IMAGES / "pause.tar")}
    first = kube_node.Preimport(images, tmp_path / "one", root).start()
    said = first.wait()
    assert first.error == "" and f"import {ref}" in first.timings, said
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
