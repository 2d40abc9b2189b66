"""Start/stop a real vLLM CPU server for tests. The implementation lives in the stack package
(vllm_rocm_stack.vllm_server) so that `make run`, the bench and the tests share one launcher; this module
is the tests' import point and adds only how a test session starts one (`start`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.sidecar_process import free_port
from vllm_rocm_stack.vllm_server import VLLM_PYTHON, VllmServer, server_env

__all__ = ["BAD_MODEL", "GOOD_MODEL", "MODELS", "VLLM_PYTHON", "VllmServer", "free_port", "server_env", "start"]

# The offline models `make setup-vllm` builds: SmolLM2-135M-Instruct, and a copy with seeded weight noise.
MODELS = WORK / "models"
GOOD_MODEL = MODELS / "smollm2-135m-instruct"
BAD_MODEL = MODELS / "smollm2-135m-instruct-perturbed"


def start(model: Path, name: str, tmp: Path) -> VllmServer:
    """`model` served as `name` on a free port, its log in `tmp`, once it answers. Skipped (not failed) only when the
    vLLM CPU setup was never run, e.g. `pytest` without `make test`."""
    for need in (VLLM_PYTHON, model / "config.json"):
        if not need.exists():
            pytest.skip(f"{need} is missing: run `make setup-vllm` (make test does it)")
    server = VllmServer(model, name, free_port(), tmp / f"{name}.log")
    server.start(timeout=600)  # ~25 s idle; several minutes on a loaded 2-core machine
    return server
