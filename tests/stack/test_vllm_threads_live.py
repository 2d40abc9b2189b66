"""The real vLLM CPU server as the tests, `make run` and the bench start it (vllm_server.CPU_ENV): no thread of it
is bound to one core, so the servers a session runs side by side are spread over the machine by the kernel."""

from __future__ import annotations

import pytest

from tests.support import threads
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.integration


def test_no_thread_of_the_server_is_bound_to_one_core(vllm_server: VllmServer) -> None:
    pid = vllm_server.process.pid
    assert pid is not None
    running = threads.threads(pid)
    # The worker (the process that computes) is in the tree, or the check below would pass on nothing.
    assert any(t.process == "VLLM::Worker" for t in running), sorted({t.process for t in running})
    assert not threads.bound(pid), threads.bound(pid)
