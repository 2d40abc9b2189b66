"""A switchable HTTP reverse proxy in front of real vLLM servers, for the bench and the robustness tests.

`switch()` re-points it (a right-answer server becomes a wrong-answer one at a known instant); `divert()` sends only
the requests whose body holds some bytes to another server (one question of many answered by a wrong model);
`fault` injects what a real server cannot be told to do on cue: `down` (connections dropped without an answer, as
while vLLM restarts), `5xx` (HTTP 503), `slow` (answers held back by `delay` seconds) and `malformed` (completions
answered HTTP 200 with a body of the wrong shape: a list where vLLM sends an object). With no fault, requests and
answers pass unchanged: what the client sees is the real server's output.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
FAULTS = (None, "down", "5xx", "slow", "malformed")
MALFORMED_BODY = b'[{"text": " 7"}]'  # 200, JSON, the wrong shape


class SwitchableProxy:
    def __init__(self, upstream: str, port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.fault: str | None = None
        self.delay = 5.0
        self.requests: dict[str, int] = {}  # path -> count, to see what a client is doing
        self.diverted = 0  # requests sent to the divert upstream
        self._divert: tuple[bytes, str] | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                with proxy._lock:
                    proxy.requests[self.path] = proxy.requests.get(self.path, 0) + 1
                fault = proxy.fault
                if fault == "down":
                    self.close_connection = True  # no status line at all: the client sees a dropped connection
                    return
                if fault == "slow":
                    time.sleep(proxy.delay)
                if fault == "5xx":
                    status, headers, data = 503, {"Content-Type": "text/plain"}, b"injected: service unavailable"
                elif fault == "malformed" and self.path == "/v1/completions":
                    status, headers, data = 200, {"Content-Type": "application/json"}, MALFORMED_BODY
                else:
                    status, headers, data = self._upstream(body)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        if k.lower() not in _HOP:
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client has gone (it timed out): nobody to answer
                    self.close_connection = True

            def _upstream(self, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
                """Forward to the upstream; if our client hangs up first (a canary request that timed out), hang
                up on the upstream too, so that vLLM aborts the request as it would for a direct client. A proxy
                that kept waiting would keep every abandoned request running on the server."""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                u = urllib.parse.urlsplit(proxy.upstream_for(body))
                conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=120)
                done = threading.Event()
                watcher = threading.Thread(target=self._hang_up_with_client, args=(conn, done), daemon=True)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    watcher.start()
                    r = conn.getresponse()
                    return r.status, dict(r.getheaders()), r.read()
                except OSError as e:  # upstream unreachable, or cut because the client left: a gateway's answer
                    return 502, {"Content-Type": "text/plain"}, str(e).encode()
                finally:
                    done.set()
                    if watcher.is_alive():
                        watcher.join(1.0)  # before the sockets it watches are closed under it
                    conn.close()

            def _hang_up_with_client(self, conn: http.client.HTTPConnection, done: threading.Event) -> None:
                client = self.connection
                while not done.is_set():
                    try:
                        ready, _, _ = select.select([client], [], [], 0.1)
                    except (OSError, ValueError):  # the client socket is already closed: nothing left to watch
                        return
                    if ready and not done.is_set():
                        try:
                            gone = client.recv(1, socket.MSG_PEEK) == b""
                        except OSError:
                            gone = True
                        if gone:
                            try:
                                if conn.sock is not None:
                                    conn.sock.shutdown(socket.SHUT_RDWR)
                            except OSError:  # the upstream connection ended meanwhile
                                pass
                            return
                        time.sleep(0.1)  # pipelined bytes of a next request: not a hang-up

            do_GET = do_POST = _forward  # noqa: N815 - http.server's naming

            def log_message(self, *args: object) -> None:  # quiet: callers print their own progress
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def switch(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")

    def divert(self, needle: bytes | None, upstream: str = "") -> None:
        """Requests whose body contains `needle` go to `upstream`, all others where switch() points; None: none."""
        self._divert = None if needle is None else (needle, upstream.rstrip("/"))

    def upstream_for(self, body: bytes | None) -> str:
        divert = self._divert
        if divert is not None and body is not None and divert[0] in body:
            with self._lock:
                self.diverted += 1
            return divert[1]
        return self.upstream

    def inject(self, fault: str | None) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
        self.fault = fault

    def count(self, path: str) -> int:
        with self._lock:
            return self.requests.get(path, 0)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
