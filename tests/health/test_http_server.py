"""The sidecar's HTTP server is bounded (issue 30, item 7): thousands of idle connections and slow partial requests
(slowloris) neither grow the real sidecar process (its threads, open descriptors and RSS, read from /proc) nor keep
/readyz, /healthz and /metrics from answering within the chart's probe timeouts. The in-process tests pin down the
rules one at a time: which connection is evicted at the cap, the request-head deadline and size limit, and the
answers to requests the endpoints do not serve."""

from __future__ import annotations

import os
import re
import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from vllm_rocm_health import http_server

from tests.support.sidecar import SidecarProcess, get

VALUES = yaml.safe_load((Path(__file__).resolve().parents[2] / "charts" / "vllm-rocm" / "values.yaml").read_text())
READY_TIMEOUT = float(VALUES["probes"]["readiness"]["timeoutSeconds"])
LIVENESS_TIMEOUT = 1.0  # the sidecar's livenessProbe sets none: Kubernetes' default
MEMORY_LIMIT_MIB = int(re.fullmatch(r"(\d+)Mi", VALUES["sidecar"]["resources"]["limits"]["memory"])[1])  # type: ignore[index]


def proc_status(pid: int) -> dict[str, int]:
    """RSS (MiB), threads and open descriptors of a process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) // 1024,
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def probe(url: str, path: str, timeout: float) -> int:
    """The status an HTTP probe with this timeout gets (0: no answer in time)."""
    try:
        return get(url + path, timeout)[0]
    except OSError:
        return 0


class Slowloris:
    """Connections that send a request head one byte every `pause` seconds and never finish it."""

    HEAD = b"GET /metrics HTTP/1.1\r\nHost: sidecar\r\nUser-Agent: slow" + b"w" * 4000

    def __init__(self, port: int, count: int, pause: float = 0.5) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
        self.closed_at: dict[int, float] = {}  # index -> monotonic time the server closed it
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, args=(pause,), daemon=True)
        self._thread.start()

    def _drip(self, pause: float) -> None:
        for i in range(len(self.HEAD)):
            for n, s in enumerate(self.socks):
                if n in self.closed_at:
                    continue
                try:
                    s.send(self.HEAD[i : i + 1])
                except OSError:
                    self.closed_at[n] = time.monotonic()
            if self._stop.wait(pause):
                return

    def all_closed(self) -> bool:
        return len(self.closed_at) == len(self.socks)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self.socks:
            s.close()


def open_idle(port: int, count: int, patience: float = 60.0) -> list[socket.socket]:
    """`count` connections that send nothing, connected at once (non-blocking: a SYN the full backlog dropped is
    sent again by the kernel, and waiting for each in turn would take a second apiece). Those connected within
    `patience` seconds are returned; the rest are closed."""
    pending = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        pending.append(s)
    connected: list[socket.socket] = []
    with selectors.DefaultSelector() as sel:
        for i, s in enumerate(pending):
            sel.register(s, selectors.EVENT_WRITE, data=i)
        deadline = time.monotonic() + patience
        while sel.get_map() and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1.0):
                s = pending[key.data]
                sel.unregister(s)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connected.append(s)
                else:
                    s.close()
        for key in list(sel.get_map().values()):
            pending[key.data].close()
    return connected


@pytest.fixture
def flood_sidecar(tmp_path: Path) -> Iterator[SidecarProcess]:
    sc = SidecarProcess(
        ["--vllm-url", "http://127.0.0.1:9", "--no-canary-enabled", "--log-source", "none"], tmp_path / "sidecar.log"
    )
    yield sc
    assert sc.stop() == 0


def test_a_connection_flood_costs_nothing_and_probes_still_answer(flood_sidecar: SidecarProcess) -> None:
    sc = flood_sidecar
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    per_wave = min(3000, (hard - 500) // 2)
    assert per_wave >= 1000, f"descriptor limit {hard} too low for a flood of thousands"
    try:
        for _ in range(20):  # warm: the first scrapes allocate what every later one reuses
            assert probe(sc.url, "/metrics", 10) == 200
        before = proc_status(sc.proc.pid)
        early = Slowloris(sc.port, 50)  # slow requests the flood then evicts (the oldest waiting go first)
        waves: list[list[socket.socket]] = []
        samples = []
        late: Slowloris | None = None
        try:
            for _ in range(2):  # the second wave on top of the first: whatever grows with connections shows
                waves.append(open_idle(sc.port, per_wave))
                for _ in range(3):
                    samples.append(proc_status(sc.proc.pid))
                    assert probe(sc.url, "/readyz", READY_TIMEOUT) == 503  # answered (vLLM is not there: 503)
                    assert probe(sc.url, "/healthz", LIVENESS_TIMEOUT) == 200
                    assert probe(sc.url, "/metrics", READY_TIMEOUT) == 200
            opened = sum(len(w) for w in waves)
            assert opened >= per_wave, f"only {opened} connections opened: no flood"
            # Slow partial requests after the flood, which nothing evicts: closed at the request-head deadline,
            # whatever they still send.
            late = Slowloris(sc.port, 20)
            for slow in (early, late):
                all_closed = slow.all_closed
                assert sc.wait_for(all_closed, http_server.HEAD_TIMEOUT + 30), f"{slow.closed_at} of {len(slow.socks)}"
            # None outlives the head deadline. (Some may go sooner: a flood connection whose handshake the full
            # accept queue held back reaches the sidecar seconds later, newer than these, and over the cap the oldest
            # waiting are evicted, which is the rule. The deadline's own timing is pinned in process below.)
            took = [t - late.started for t in late.closed_at.values()]
            assert max(took) < http_server.HEAD_TIMEOUT + 30, took
            samples.append(proc_status(sc.proc.pid))
        finally:
            for group in (early, late):
                if group is not None:
                    group.close()
            for w in waves:
                for s in w:
                    s.close()
        worst = {k: max(s[k] for s in samples) for k in before}
        # Flat: no thread per connection, at most the cap of descriptors, and memory that does not follow the flood.
        assert worst["threads"] <= before["threads"] + 2, (before, samples)
        assert worst["fds"] <= before["fds"] + http_server.MAX_CONNECTIONS + 4, (before, samples)
        assert worst["rss_mib"] - before["rss_mib"] <= 24, (before, samples)
        assert worst["rss_mib"] < MEMORY_LIMIT_MIB / 2, (before, samples)
        # The flood's connections were closed by the sidecar without an answer, and counted. (Not every one the
        # client saw connected: a handshake the kernel completed while the accept queue was full may never reach
        # the sidecar before the client closes it.)
        dropped = lambda: sc.value("vllm_sidecar_http_connections_dropped_total") or 0  # noqa: E731
        least = opened // 2 + len(early.socks) + len(late.socks)
        assert sc.wait_for(lambda: dropped() >= least, 60), (dropped(), opened)
        # And after it, the endpoints as before.
        assert probe(sc.url, "/readyz", READY_TIMEOUT) == 503
        assert probe(sc.url, "/metrics", READY_TIMEOUT) == 200
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- the rules, in process ---------------------------------------------------------------------------------------


class SmallServer(http_server.HealthServer):
    """A cap of 4 connections; `dropped` counts what on_drop was told."""

    def __init__(self, head_timeout: float) -> None:
        self.dropped = 0
        super().__init__(
            ("127.0.0.1", 0),
            lambda path: http_server.route(path, CollectorRegistry(), lambda: (True, "ok")),
            on_drop=self._count,
            max_connections=4,
            head_timeout=head_timeout,
        )
        self.port = self.server_address[1]

    def _count(self) -> None:
        self.dropped += 1


@pytest.fixture
def small_server(request: pytest.FixtureRequest) -> Iterator[SmallServer]:
    server = SmallServer(getattr(request, "param", 60.0))
    yield server
    server.shutdown()
    server.server_close()


def exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send `data`, read until the server closes: the whole answer (b"" when closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:  # closed with our bytes unread: what is in is all there is
            pass
        return b"".join(chunks)


def closed_by_server(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_answers(small_server: SmallServer) -> None:
    port = small_server.port
    ready = exchange(port, b"GET /readyz?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")
    assert ready.startswith(b"HTTP/1.0 200 OK\r\n") and ready.endswith(b'{"ready": true, "reason": "ok"}\n')
    assert b"Connection: close" in ready
    assert exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n").endswith(b'{"alive": true}\n')
    assert exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 200 OK")
    head = exchange(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and head.endswith(b"\r\n\r\n")  # headers, no body
    assert exchange(port, b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 404")
    assert exchange(port, b"POST /readyz HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.0 405")
    assert exchange(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.0 400")


@pytest.mark.parametrize("small_server", [1.0], indirect=True)
def test_a_slow_or_oversized_head_is_dropped(small_server: SmallServer) -> None:
    port = small_server.port
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /readyz HTTP/1.1\r\n")  # never finished
        assert closed_by_server(s, 10)
    assert exchange(port, b"GET /readyz HTTP/1.1\r\nX: " + b"x" * http_server.MAX_HEAD + b"\r\n\r\n") == b""
    assert small_server.dropped == 2


def test_at_the_cap_the_oldest_waiting_connection_goes(small_server: SmallServer) -> None:
    port = small_server.port
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        # The kernel queues connections in order and the loop accepts them one at a time: the idle four are
        # accepted before the fifth, whenever the loop's thread gets to run.
        # A fifth connection (a probe) is answered; the oldest idle one made room for it.
        assert exchange(port, b"GET /readyz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 200")
        assert closed_by_server(idle[0], 30)  # closed before the fifth was answered
        assert not closed_by_server(idle[1], 0.2)
        assert small_server.dropped == 1
    finally:
        for s in idle:
            s.close()
