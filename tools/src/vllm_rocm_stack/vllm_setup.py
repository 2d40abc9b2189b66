"""The vLLM CPU setup's lock: tools/setup-vllm-cpu.sh holds it (flock) while it runs. `make test` starts the test
sessions as soon as the setup holds it (vllm_rocm_stack.testrun): the unit tier needs none of it, and every test of the
integration and system tiers waits for it to be free before its setup (tests/support/tiers.py)."""

from __future__ import annotations

from pathlib import Path

from . import kube_build
from .config import REPO, WORK

COMMAND = ["bash", str(REPO / "tools" / "setup-vllm-cpu.sh")]
LOCK = WORK / ".setup-vllm.lock"
# Measured 2.4 min alone and 7 min beside the Kubernetes build on 2 busy cores; past this, something is wrong.
WAIT = 1800.0


def running(lock: Path = LOCK) -> bool:
    return kube_build.running(lock)


def wait(lock: Path = LOCK, timeout: float = WAIT) -> None:
    kube_build.wait(lock, timeout, what="the vLLM CPU setup (tools/setup-vllm-cpu.sh)")
