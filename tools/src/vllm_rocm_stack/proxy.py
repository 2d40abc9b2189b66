"""A switchable HTTP reverse proxy in front of real vLLM servers, for the bench and the robustness tests.

`switch()` re-points it (a right-answer server becomes a wrong-answer one at a known instant); `fault` injects
what a real server cannot be told to do on cue: `down` (connections dropped without an answer, as while vLLM
restarts), `5xx` (HTTP 503) and `slow` (answers held back by `delay` seconds). With no fault, requests and
answers pass unchanged: what the client sees is the real server's output.
"""
from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
FAULTS = (None, "down", "5xx", "slow")


class SwitchableProxy:
    def __init__(self, upstream: str, port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.fault: str | None = None
        self.delay = 5.0
        self.requests: dict[str, int] = {}  # path -> count, to see what a client is doing
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
                else:
                    status, headers, data = self._upstream(body)
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _upstream(self, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                req = urllib.request.Request(proxy.upstream + self.path, data=body, headers=headers,
                                             method=self.command)
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        return r.status, dict(r.headers.items()), r.read()
                except urllib.error.HTTPError as e:
                    return e.code, dict(e.headers.items()), e.read()
                except OSError as e:  # upstream unreachable: a gateway's answer
                    return 502, {"Content-Type": "text/plain"}, str(e).encode()

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
