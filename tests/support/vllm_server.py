"""Start/stop a real vLLM CPU server for tests. The implementation lives in the stack package
(vllm_rocm_stack.vllm_server) so that `make run`, the bench and the tests share one launcher; this module
is the tests' import point and adds nothing pytest-specific (importable without pytest)."""
from __future__ import annotations

import socket

from vllm_rocm_stack.vllm_server import VLLM_PYTHON, VllmServer, server_env

__all__ = ["VLLM_PYTHON", "VllmServer", "free_port", "server_env"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
