"""Start/stop a real vLLM CPU server for tests. The implementation lives in the stack package
(vllm_rocm_stack.vllm_server) so that `make run`, the bench and the tests share one launcher; this module
is the tests' import point and adds nothing pytest-specific (importable without pytest)."""

from __future__ import annotations

from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.sidecar_process import free_port
from vllm_rocm_stack.vllm_server import VLLM_PYTHON, VllmServer, server_env

__all__ = ["BAD_MODEL", "GOOD_MODEL", "MODELS", "VLLM_PYTHON", "VllmServer", "free_port", "server_env"]

# The offline models `make setup-vllm` builds: SmolLM2-135M-Instruct, and a copy with seeded weight noise.
MODELS = WORK / "models"
GOOD_MODEL = MODELS / "smollm2-135m-instruct"
BAD_MODEL = MODELS / "smollm2-135m-instruct-perturbed"
