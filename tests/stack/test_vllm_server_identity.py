"""The tools' VllmServer (`make run`, bench, the live tests' servers) counts a start ready only when /health answers
and this start's log says vLLM serves: the port free_port() chose may go to another process before vLLM binds it.
The servers here are stand-ins (small Python scripts that answer /health and print vLLM's line or not): the race
cannot be made on cue with a real vLLM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from vllm_rocm_qualify.processes import free_port
from vllm_rocm_stack.vllm_server import VllmServer

from tests.support.serving_stand_in import NEVER_BINDS, SERVES, another_server, serving_line


def stand_in(tmp_path: Path, port: int, script: str) -> VllmServer:
    """A VllmServer whose "python" runs `script` instead of vLLM (its argv, --port included, is passed on)."""
    (tmp_path / "stand_in.py").write_text(script)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {tmp_path / "stand_in.py"} "$@"\n')
    python.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return VllmServer(model, "m", port, tmp_path / "vllm.log", python=python)


def test_a_start_whose_log_says_it_serves_is_ready(tmp_path: Path) -> None:
    server = stand_in(tmp_path, free_port(), SERVES)
    try:
        server.start(timeout=120)
        assert server.startup_seconds > 0 and not server.foreign
    finally:
        server.stop()


def test_an_answer_on_the_port_before_the_log_says_so_is_not_the_servers(tmp_path: Path) -> None:
    with another_server() as port:
        server = stand_in(tmp_path, port, NEVER_BINDS)
        try:
            with pytest.raises(
                RuntimeError, match=f"/health on port {port} answered, but the log never said vLLM serves"
            ):
                server.start(timeout=3)
            assert not server.alive(), "the start that failed left its process running"
        finally:
            server.stop()


def test_an_earlier_starts_line_does_not_count(tmp_path: Path) -> None:
    """The log is appended to: the line of a start before this one (a restart on the same log) says nothing."""
    with another_server() as port:
        server = stand_in(tmp_path, port, NEVER_BINDS)
        server.log_path.write_text(serving_line(port))
        try:
            with pytest.raises(RuntimeError, match="another process holds the port"):
                server.start(timeout=3)
        finally:
            server.stop()
