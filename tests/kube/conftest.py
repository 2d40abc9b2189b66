"""The cluster tests' fixtures: one real control plane per test session (etcd + kube-apiserver built from the pinned
Kubernetes release, tests/support/kube.py), with the CRDs the chart uses installed from their released modules.

A missing binary, etcd or CRD set fails these tests with the command that provides it (`make setup`); it never skips
them: `make test` installs all of it."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for path in (REPO, REPO / "tests" / "charts"):  # `tests.support` and the chart tests' helm_chart, however started
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from vllm_rocm_stack.config import WORK  # noqa: E402

from tests.support import kube  # noqa: E402

CHART_TESTS = REPO / "tests" / "charts"
KUBE_TESTS = Path(__file__).resolve().parent
CHART_TESTS_IN_SESSION = pytest.StashKey[bool]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The dry-run tests apply what the chart tests rendered in this session (helm_chart.RENDERED), so they run after
    them, whatever order the paths were given in."""
    in_session = any(CHART_TESTS in Path(str(item.path)).parents for item in items)
    config.stash[CHART_TESTS_IN_SESSION] = in_session
    if in_session:
        items.sort(key=lambda item: KUBE_TESTS in Path(str(item.path)).parents)  # stable: only moves these last


@pytest.fixture(scope="session")
def chart_tests_in_session(request: pytest.FixtureRequest) -> bool:
    return request.config.stash.get(CHART_TESTS_IN_SESSION, False)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[kube.ControlPlane]:
    """etcd + kube-apiserver on loopback, started once per session; its state lives in WORK/tmp/kube-* and is removed
    afterwards (kept, and named in the failure, when it did not start)."""
    lacking = kube.missing()
    if lacking:
        pytest.fail("the cluster tests need a control plane this checkout has not built:\n  " + "\n  ".join(lacking))
    (WORK / "tmp").mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="kube-", dir=WORK / "tmp"))
    plane = kube.ControlPlane(root)
    try:
        plane.start()
    except BaseException as e:
        plane.stop()
        pytest.fail(f"the control plane did not start (state kept in {root}): {e}")
    print(
        f"\ncontrol plane (kube-apiserver v{kube.BUILD_VERSION}, etcd) ready in {plane.started_in:.1f} s at {plane.url}"
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
