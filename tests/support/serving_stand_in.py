"""Stand-ins for a starting vLLM server, for the tests of "is what answers on the port the server we started?"
(qualify's ModeServer, the tools' VllmServer): a script that binds the port and says so in vLLM's words, one that never
binds, and an HTTP handler that answers /health for whoever holds the port. Named stand-ins, not vLLM: the race they
stage (the port given to another process between its pick and the server's bind) cannot be made on cue with a real
server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from tests.support.http import LocalServer

# The port from `--port N` (vLLM's argv), else the first argument. vLLM 0.32.0's line: entry.py:140.
SERVES = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

args = sys.argv[1:]
port = int(args[args.index("--port") + 1] if "--port" in args else args[0])
httpd = HTTPServer(("127.0.0.1", port), H)
print(f"(APIServer pid=1) INFO 12-06 09:15:25 [entry.py:140] Starting vLLM server on http://127.0.0.1:{port}",
      flush=True)
httpd.serve_forever()
"""
NEVER_BINDS = "import time\nprint('loading', flush=True)\ntime.sleep(600)\n"


def serving_line(port: int, host: str = "127.0.0.1") -> str:
    return f"(APIServer pid=1) INFO 12-06 09:15:25 [entry.py:140] Starting vLLM server on http://{host}:{port}\n"


class Healthy(BaseHTTPRequestHandler):
    """Answers 200 to any GET: another process's server on the port."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def another_server() -> Iterator[int]:
    """Another process's server (Healthy) on a port of its own, for as long as the block runs: its port."""
    stub = LocalServer(Healthy)
    try:
        yield int(stub.url.rsplit(":", 1)[1])
    finally:
        stub.close()
