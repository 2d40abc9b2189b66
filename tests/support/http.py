"""HTTP for tests: GET for polling a server which may not be listening yet (a refused or timed-out connection is
status 0), and a small loopback server for the failure injectors."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def get(url: str, timeout: float = 10) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output free of access lines."""

    def log_message(self, *args: object) -> None:
        pass


class LocalServer:
    """`handler` served on a free loopback port from a daemon thread until close()."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str = "test-server") -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name=name, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
