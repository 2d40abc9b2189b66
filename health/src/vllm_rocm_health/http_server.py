"""/metrics, /healthz and /readyz on one small threaded HTTP server."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)


def serve(
    addr: tuple[str, int], registry: CollectorRegistry, readiness: Callable[[], tuple[bool, str]]
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b'{"alive": true}\n', "application/json")
            elif path == "/readyz":
                ok, reason = readiness()
                body = json.dumps({"ready": ok, "reason": reason}).encode() + b"\n"
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b"not found: try /metrics, /healthz, /readyz\n", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: object) -> None:  # scrapes every few seconds: keep them quiet
            log.debug("http %s", fmt % args)

    server = ThreadingHTTPServer(addr, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
