"""The tests' import point for the sidecar launcher, which lives in the stack package
(vllm_rocm_stack.sidecar_process) so that the bench and the tests share it."""

from __future__ import annotations

from vllm_rocm_stack.sidecar_process import SidecarProcess, free_port, get

__all__ = ["SidecarProcess", "free_port", "get"]
