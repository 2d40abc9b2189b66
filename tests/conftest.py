"""Session-wide fixtures: the real vLLM CPU servers (started once per test session, not per test)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.proxy import SwitchableProxy

from tests.support.vllm_server import VLLM_PYTHON, VllmServer, free_port

MODELS = WORK / "models"
GOOD_MODEL = MODELS / "smollm2-135m-instruct"
BAD_MODEL = MODELS / "smollm2-135m-instruct-perturbed"


def _start(model: Path, name: str, tmp: Path) -> VllmServer:
    # Skipped (not failed) only when the vLLM CPU setup was never run, e.g. `pytest` without `make test`.
    for need in (VLLM_PYTHON, model / "config.json"):
        if not need.exists():
            pytest.skip(f"{need} is missing: run `make setup-vllm` (make test does it)")
    server = VllmServer(model, name, free_port(), tmp / f"{name}.log")
    server.start(timeout=600)  # ~25 s idle; several minutes on a loaded 2-core machine
    return server


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """SmolLM2-135M-Instruct on the real vLLM CPU build, --enforce-eager. Its log file is what a sidecar follows."""
    server = _start(GOOD_MODEL, "smollm2-135m-instruct", tmp_path_factory.mktemp("vllm"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm_perturbed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The same model with seeded weight noise: a real vLLM that returns HTTP 200 with wrong tokens."""
    server = _start(BAD_MODEL, "smollm2-135m-instruct", tmp_path_factory.mktemp("vllm-bad"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(vllm_server: VllmServer) -> Iterator[SwitchableProxy]:
    """The failure injector in front of the real server (vllm_rocm_stack.proxy): forwards unchanged until a test
    sets a fault or switches it to another server. One per test module, so faults never leak between modules."""
    p = SwitchableProxy(vllm_server.base_url)
    yield p
    p.close()
