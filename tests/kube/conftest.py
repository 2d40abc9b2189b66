"""The cluster tests' fixtures, each started once per test session: a control plane without a node for the dry runs
(etcd + kube-apiserver built from the pinned Kubernetes release, tests/support/kube.py), with the CRDs the chart uses
installed from their released modules; and a single-node cluster that runs the chart (tests/support/kube_node.py).

A missing binary, etcd or CRD set fails these tests with the command that provides it (`make setup`); it never skips
them: `make test` installs all of it. The node tests are skipped, saying why, only on a machine that refuses a node
(not root, no cgroup controllers)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.config import WORK

from tests.support import kube, kube_node, tiers
from tests.support.images import node_images, wait_node_preimport
from tests.support.terminal import say

REPO = Path(__file__).resolve().parents[2]


def state_dir(prefix: str) -> Path:
    """A new directory in WORK/tmp for one cluster's state (removed after a clean stop, kept after a failed start)."""
    (WORK / "tmp").mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=WORK / "tmp"))


@pytest.fixture(scope="session")
@tiers.needs("system", "starts etcd and kube-apiserver")
def control_plane(request: pytest.FixtureRequest) -> Iterator[kube.ControlPlane]:
    """etcd + kube-apiserver on loopback, started once per session; its state lives in WORK/tmp/kube-* and is removed
    afterwards (kept, and named in the failure, when it did not start)."""
    lacking = kube.missing()
    if lacking:
        pytest.fail("the cluster tests need a control plane this checkout has not built:\n  " + "\n  ".join(lacking))
    root = state_dir("kube-")
    plane = kube.ControlPlane(root)
    try:
        plane.start()
    except BaseException as e:
        plane.stop()
        pytest.fail(f"the control plane did not start (state kept in {root}): {e}")
    say(
        request.config,
        f"control plane (kube-apiserver v{kube.BUILD_VERSION}, etcd) ready in {plane.started_in:.1f} s at {plane.url}",
    )
    try:
        yield plane
    finally:
        plane.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def crds(control_plane: kube.ControlPlane) -> list[str]:
    """The CRDs of the objects the chart renders (and its docs' AlertmanagerConfig), as their projects release them."""
    return control_plane.install_crds(kube.crd_files())


@pytest.fixture(scope="session")
@tiers.needs("system", "starts a single-node Kubernetes cluster")
def node_cluster(built_images: dict, request: pytest.FixtureRequest) -> Iterator[kube_node.NodeCluster]:
    """A single-node cluster (tests/support/kube_node.py) with the session's vLLM CPU image and sidecar image in its
    containerd, started once per session in a network namespace of its own; everything it made is removed afterwards,
    also when a test or the start fails (the state directory is kept and named when the start failed)."""
    why = kube_node.refusal()
    if why:
        pytest.skip(f"this machine cannot run a Kubernetes node: {why}")
    lacking = kube_node.missing()
    if lacking:
        pytest.fail("the node tests need what this checkout has not set up:\n  " + "\n  ".join(lacking))
    root = state_dir("node-")
    cluster = kube_node.NodeCluster(root)
    atexit.register(cluster.stop)  # an interrupted session (KeyboardInterrupt in a fixture) still cleans up
    images = node_images(built_images)
    wait_node_preimport(request.config)  # one containerd at a time owns the store
    try:
        cluster.start(images=images)
    except BaseException as e:
        cluster.stop()
        pytest.fail(f"the single-node cluster did not start (state kept in {root}): {e}")
    say(
        request.config,
        f"single-node cluster (Kubernetes v{kube.BUILD_VERSION}) ready in {cluster.started_in:.1f} s, "
        f"seconds per step: {cluster.timings}",
    )
    try:
        yield cluster
    finally:
        cluster.stop()
        atexit.unregister(cluster.stop)
    left = cluster.leftovers()
    assert not left, f"the cluster's teardown left these on the machine (state in {root}): {left}"
    shutil.rmtree(root, ignore_errors=True)
