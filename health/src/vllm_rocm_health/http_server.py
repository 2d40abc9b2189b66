"""/metrics, /healthz and /readyz on one small HTTP server whose cost per client is bounded.

A thread per connection (http.server's ThreadingHTTPServer) let a few thousand idle connections grow the sidecar
past its memory limit (256 MiB in the chart): the kubelet would OOM-kill it and the pod leave the Service. Here one
event loop owns every connection, and an idle one costs a socket and a small buffer:
- at most MAX_CONNECTIONS are open. The loop accepts one connection at a time and, over the cap, closes the oldest
  one still waiting for its request: a flood evicts itself, and a probe, which sends its request at once, is served;
- a request head must arrive in full within HEAD_TIMEOUT seconds of the accept (slowloris) and hold at most MAX_HEAD
  bytes; an answer the client does not read is dropped after WRITE_TIMEOUT;
- each connection answers one request and closes, as HTTP/1.0 does;
- the answers are computed on a small thread pool, so a slow /metrics never stops the loop from accepting and
  evicting."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64  # a kubelet, a Prometheus or two and a person with curl need a handful
HEAD_TIMEOUT = 5.0  # seconds from accept to a complete request head; the readiness probe's own timeout is 3 s
WRITE_TIMEOUT = 10.0  # seconds to hand an answer to a client that does not read it
MAX_HEAD = 8192  # bytes of request line + headers; ours need a few hundred
BACKLOG = 128  # the kernel's queue of connections not accepted yet (kernel memory, not ours)

Answer = tuple[int, bytes, str]  # status, body, content type


def route(path: str, registry: CollectorRegistry, readiness: Callable[[], tuple[bool, str]]) -> Answer:
    if path == "/metrics":
        return 200, generate_latest(registry), CONTENT_TYPE_LATEST
    if path == "/healthz":
        return 200, b'{"alive": true}\n', "application/json"
    if path == "/readyz":
        ok, reason = readiness()
        return 200 if ok else 503, json.dumps({"ready": ok, "reason": reason}).encode() + b"\n", "application/json"
    return 404, b"not found: try /metrics, /healthz, /readyz\n", "text/plain"


class _Connection:
    __slots__ = ("sock", "transport", "answering")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.transport: asyncio.Transport | None = None
        self.answering = False  # its request head is in: it is being answered, never evicted

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        else:
            self.sock.close()


class HealthServer:
    """The sidecar's endpoints on `addr`, served from a daemon thread until shutdown(). `on_drop` is called (in the
    loop's thread) for every connection closed without an answer: evicted at the cap, too slow, or too large."""

    def __init__(
        self,
        addr: tuple[str, int],
        answer: Callable[[str], Answer],
        on_drop: Callable[[], None] | None = None,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout: float = HEAD_TIMEOUT,
    ) -> None:
        self.answer = answer
        self.on_drop = on_drop or (lambda: None)
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self._conns: dict[int, _Connection] = {}  # insertion order is age: the first waiting one is the oldest
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http-answer")
        # Bound here, in the caller's thread: a port in use is a start error, not a dead thread.
        self._sock = socket.create_server(addr, backlog=BACKLOG)
        self._sock.setblocking(False)
        self.server_address: tuple[str, int] = self._sock.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        self._accepting = self._loop.create_task(self._accept())
        self._thread = threading.Thread(target=self._loop.run_forever, name="http", daemon=True)
        self._thread.start()

    async def _accept(self) -> None:
        while True:
            try:
                sock, _ = await self._loop.sock_accept(self._sock)
            except OSError as e:  # out of descriptors, say: the connections held now are answered meanwhile
                log.warning("http: accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            conn = _Connection(sock)
            self._conns[id(conn)] = conn
            self._make_room()
            self._loop.create_task(self._handle(conn))
            # sock_accept returns at once while the kernel's queue holds connections: yield, so that the evicted
            # ones are really closed (their close is scheduled, not done) before the next is accepted.
            await asyncio.sleep(0)

    def _make_room(self) -> None:
        """Over the cap: close the oldest connections still waiting for their request."""
        while len(self._conns) > self.max_connections:
            victim = next((k for k, c in self._conns.items() if not c.answering), None)
            if victim is None:
                return  # every one is being answered (a few ms each): the newest one waits its turn
            self._conns.pop(victim).drop()
            self.on_drop()

    def _dropped(self, conn: _Connection) -> None:
        """Closed without an answer; counted once, whether by an eviction or here."""
        if self._conns.pop(id(conn), None) is not None:
            conn.drop()
            self.on_drop()

    async def _handle(self, conn: _Connection) -> None:
        reader = asyncio.StreamReader(limit=MAX_HEAD)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await self._loop.connect_accepted_socket(lambda: protocol, conn.sock)
        except (OSError, ValueError):  # evicted before this task ran: the socket is closed already
            self._dropped(conn)
            return
        conn.transport = transport
        writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
        # No user-space write buffer to speak of: drain() returns once the answer is in the kernel's socket buffer,
        # so an answer the client never reads costs nothing here after WRITE_TIMEOUT.
        transport.set_write_buffer_limits(high=0)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout)
            except (asyncio.TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, OSError):
                self._dropped(conn)
                return
            conn.answering = True
            status, body, ctype = await self._answer(head)
            writer.write(
                f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except (asyncio.TimeoutError, OSError):
            pass  # the client went away or does not read: nothing more to do for it
        except Exception:  # a bug answering one request must not take the endpoint down
            log.exception("http: answering a request failed")
        finally:
            self._conns.pop(id(conn), None)
            if transport.get_write_buffer_size():
                transport.abort()  # an answer nobody reads: dropped, not kept until the client reads
            else:
                transport.close()

    async def _answer(self, head: bytes) -> Answer:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, b"bad request\n", "text/plain"
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return 405, b"only GET\n", "text/plain"
        return await self._loop.run_in_executor(self._pool, self.answer, target.split("?", 1)[0])

    async def _stop(self) -> None:
        self._accepting.cancel()
        for c in self._conns.values():
            c.drop()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.stop()

    def shutdown(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
            self._thread.join(5.0)

    def server_close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()
        if not self._thread.is_alive():
            self._loop.close()


def serve(
    addr: tuple[str, int],
    registry: CollectorRegistry,
    readiness: Callable[[], tuple[bool, str]],
    on_drop: Callable[[], None] | None = None,
) -> HealthServer:
    return HealthServer(addr, lambda path: route(path, registry, readiness), on_drop)
