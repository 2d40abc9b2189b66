"""qualify counts a server ready only when its own log says it serves: the port was free when it was chosen, and any
process may be given it before the server binds it. Run 34 of the suite measured a test's
HTTP stub that way (it answered /health 17 s into a vLLM start): an answer that is not the server's must end in a
start failure that says so, never in a measurement."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from vllm_rocm_qualify.processes import free_port
from vllm_rocm_qualify.server import ModeServer, StartFailed

from tests.support.serving_stand_in import NEVER_BINDS, SERVES, another_server


def server(tmp_path: Path, port: int, script: str) -> ModeServer:
    path = tmp_path / "server.py"
    path.write_text(script)
    argv = [sys.executable, str(path), str(port)]
    s = ModeServer("NONE", argv, tmp_path / "NONE.log", {"PATH": "/usr/bin:/bin"}, f"http://127.0.0.1:{port}", "NONE")
    s.launch()
    return s


def test_a_server_that_says_it_serves_on_its_port_is_ready(tmp_path: Path) -> None:
    s = server(tmp_path, free_port(), SERVES)
    try:
        s.wait_ready(timeout=120)
        assert s.ready_seconds > 0 and not s.foreign
    finally:
        s.stop()


def test_an_answer_from_another_process_is_not_the_servers(tmp_path: Path) -> None:
    """A stub holds the port and answers /health; the server under test is still starting (never binds): not ready,
    and the failure names the port and why."""
    with another_server() as port:
        s = server(tmp_path, port, NEVER_BINDS)
        try:
            with pytest.raises(StartFailed, match=f"/health on port {port} answered, but the server's log never said"):
                s.wait_ready(timeout=3)
            assert s.foreign and s.ready_seconds == 0
        finally:
            s.stop()


def test_a_server_whose_port_was_taken_fails_saying_so(tmp_path: Path) -> None:
    """The usual end of that race: the server cannot bind the port the other process took, and exits."""
    with another_server() as port:
        s = server(tmp_path, port, SERVES)
        try:
            with pytest.raises(StartFailed, match=f"port {port} was taken by another process"):
                s.wait_ready(timeout=120)
        finally:
            s.stop()


def test_a_server_behind_a_port_mapping_names_its_own_port(tmp_path: Path) -> None:
    """`docker run -p {port}:8000 ...`: vLLM says it serves on 8000 inside the container; that is the server's own
    word that it serves, and counts."""
    port = free_port()
    s = server(tmp_path, port, SERVES.replace("http://127.0.0.1:{port}", "http://0.0.0.0:8000"))
    try:
        s.wait_ready(timeout=120)
        assert s.log.serving_on == {8000} and not s.foreign
    finally:
        s.stop()


def test_ports_come_from_below_the_kernels_ephemeral_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel hands ports of its ephemeral range to whoever asks for any free port; qualify's picks stay below
    it (and below NodePorts), so they are not handed out before the server binds them. Without a band below the
    range, or with every port of it taken, the kernel's choice."""
    from vllm_rocm_qualify import processes

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {processes.free_port() for _ in range(20)}
    assert all(processes.PORT_BAND[0] <= p < min(processes.PORT_BAND[1], low) for p in ports), (ports, low)
    assert len(ports) > 1, "not random: two pickers would meet"
    narrow = tmp_path / "range"
    narrow.write_text("20005\t60999\n")
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE", narrow)
    held = []
    try:
        for port in range(20000, 20004):  # all but one port of the band are in use
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
        free = [p for p in range(20000, 20005) if p not in {s.getsockname()[1] for s in held}]
        assert processes.free_port() in free
    finally:
        for s in held:
            s.close()
    narrow.write_text("1024 60999\n")  # no band below the range: the kernel's choice
    assert processes.free_port() >= 1024
