"""The test tiers (the plugin tests/support/tiers.py: `unit` for an unmarked test, a fixture's tier enforced at
setup), and session-wide fixtures: the real vLLM CPU servers (started once per test session, not per test), the canary
baseline recorded on the good one through the real CLI, and the canary timings derived from what one canary run
measurably takes on this machine now (a busy 2-core CI machine runs it several times slower than an idle one; no
interval or timeout of a live test is a constant)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.proxy import SwitchableProxy

from tests.support import crowd, tiers
from tests.support.canary import CanaryTiming, measure_timing, record_baseline
from tests.support.images import build_images, start_node_preimport, wait_node_preimport
from tests.support.vllm_server import BAD_MODEL, GOOD_MODEL, VLLM_PYTHON, VllmServer, start

# The tiers' hooks: every test gets its tier (`unit` when unmarked), each checked before its fixtures start. The
# modules that hold the crowd of vLLM engines and need no cluster go first (tests/support/crowd.py).
pytest_runtest_setup = tiers.pytest_runtest_setup


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers.pytest_collection_modifyitems(items)
    crowd.run_first(items)


@pytest.fixture(scope="session")
@tiers.needs("integration", "starts the vLLM CPU server")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """SmolLM2-135M-Instruct on the real vLLM CPU build, --enforce-eager. Its log file is what a sidecar follows."""
    server = start(GOOD_MODEL, "smollm2-135m-instruct", tmp_path_factory.mktemp("vllm"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
@tiers.needs("integration", "starts the perturbed vLLM CPU server")
def vllm_perturbed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The same model with seeded weight noise: a real vLLM that returns HTTP 200 with wrong tokens."""
    server = start(BAD_MODEL, "smollm2-135m-instruct", tmp_path_factory.mktemp("vllm-bad"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(vllm_server: VllmServer) -> Iterator[SwitchableProxy]:
    """The failure injector in front of the real server (vllm_rocm_stack.proxy): forwards unchanged until a test
    sets a fault or switches it to another server. One per test module, so faults never leak between modules."""
    p = SwitchableProxy(vllm_server.base_url)
    yield p
    p.close()


@pytest.fixture(scope="session")
def baseline_file(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recorded through the real CLI, as an operator would."""
    return record_baseline(vllm_server.base_url, tmp_path_factory.mktemp("baseline") / "baseline.json")


@pytest.fixture(scope="session")
def canary_timing(vllm_server: VllmServer, baseline_file: Path) -> CanaryTiming:
    return measure_timing(vllm_server.base_url, baseline_file)


@pytest.fixture(scope="session")
@tiers.needs("system", "builds the images")
def built_images(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict]:
    """The project's images, built once per session (tests/support/images.py): the container tests run them under
    podman, the cluster tests under a kubelet. A session that will start the node begins importing them into the
    node's store at once, in the background (the node's start waits for it; at the latest the session's end does)."""
    built = build_images(tmp_path_factory.mktemp("images"), request.config)
    start_node_preimport(request, built)
    yield built
    wait_node_preimport(request.config)


@pytest.fixture(scope="session")
@tiers.needs("integration", "runs the vLLM CPU venv's python")
def vllm_python() -> Path:
    """The vLLM CPU venv's interpreter (`make setup-vllm`): the real release's parser, sources and metadata."""
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} missing: run `make setup-vllm`")
    return VLLM_PYTHON
