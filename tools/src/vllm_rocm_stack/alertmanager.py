"""A real Alertmanager (Debian's `prometheus-alertmanager`) for the local stack and the tests, the routing it runs
(docker/alertmanager/alertmanager.yml, every receiver pointed at a local webhook), and that webhook receiver: a
stdlib HTTP server in a thread that appends each notification to a JSON-lines file and says what it got."""

from __future__ import annotations

import copy
import json
import shutil
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from vllm_rocm_qualify.processes import ManagedProcess, wait_until

from .config import REPO

EXAMPLE_CONFIG = REPO / "docker" / "alertmanager" / "alertmanager.yml"


def local_config(config: dict[str, Any], receiver_url: str, timing: str = "") -> dict[str, Any]:
    """The shipped routing with each receiver replaced by one webhook to `receiver_url`/<receiver name> (resolved
    notifications included), so that whatever a user's receivers were, every notification reaches the local one.
    `timing` (a duration) makes group_wait and group_interval that short, everywhere in the tree: for tests and
    demos, so that an alert and its resolution reach the receiver in seconds instead of minutes."""
    out = copy.deepcopy(config)
    base = receiver_url.rstrip("/")
    out["receivers"] = [
        {"name": r["name"], "webhook_configs": [{"url": f"{base}/{r['name']}", "send_resolved": True}]}
        for r in out.get("receivers", [])
    ]
    if timing:

        def shorten(route: dict[str, Any]) -> None:
            route["group_wait"] = route["group_interval"] = timing
            for child in route.get("routes", []):
                shorten(child)

        shorten(out["route"])
    return out


def summary(payload: dict[str, Any]) -> str:
    """One line for a webhook notification: receiver, then each alert's name (with its readiness reason, for
    VllmPodHeldOut), status and instance."""
    parts = []
    for a in payload.get("alerts") or []:
        labels = a.get("labels", {})
        name = labels.get("alertname", "?") + (f"({labels['reason']})" if "reason" in labels else "")
        parts.append(f"{name} {a.get('status', '?')} on {labels.get('instance', '(no instance)')}")
    return f"notification to {payload.get('receiver', '?')}: " + ("; ".join(parts) or "(no alerts)")


class WebhookReceiver:
    """Alertmanager's webhook receiver for the local stack: each POSTed notification is appended to `out_path` as
    one JSON line (the payload as sent) and `say(summary)` is called; a GET says where they go."""

    def __init__(self, port: int, out_path: Path, say: Callable[[str], None] = print, host: str = "127.0.0.1") -> None:
        self.host = host
        self.out_path = out_path
        self.say = say
        self.count = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body)
                    if not isinstance(payload, dict):
                        raise ValueError("not a JSON object")
                except ValueError as e:
                    self._answer(400, f"not an Alertmanager notification: {e}\n")
                    return
                receiver.record(payload)
                self._answer(200, "ok\n")

            def do_GET(self) -> None:  # noqa: N802
                self._answer(
                    200,
                    f"webhook receiver: POST Alertmanager notifications here; {receiver.count} "
                    f"received, appended to {receiver.out_path}\n",
                )

            def _answer(self, code: int, text: str) -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # quiet: record() says what came
                pass

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise RuntimeError(f"the webhook receiver cannot listen on {host}:{port}: {e}") from e
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self.out_path.touch()
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()

    def record(self, payload: dict[str, Any]) -> None:
        line = json.dumps(payload, separators=(",", ":")) + "\n"
        with self._lock:
            with open(self.out_path, "a", encoding="utf-8") as fh:
                fh.write(line)
            self.count += 1
        self.say(summary(payload))

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()


def notifications(path: Path) -> list[dict[str, Any]]:
    """The payloads a WebhookReceiver wrote, oldest first (a line being written is skipped)."""
    out: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@dataclass
class AlertmanagerServer:
    """Debian's Alertmanager on 127.0.0.1:`port`, in cluster mode off (no gossip port), its data in `workdir`."""

    workdir: Path
    port: int
    config: dict[str, Any]
    binary: str = "prometheus-alertmanager"
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / "alertmanager.yml"

    def write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        return self.config_path

    def start(self, timeout: float = 30.0) -> None:
        exe = shutil.which(self.binary)
        if exe is None:
            raise RuntimeError(
                f"{self.binary} is not on PATH: run `make setup` (installs the Debian package prometheus-alertmanager)"
            )
        config = self.write_config()
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess(
            "alertmanager",
            [
                exe,
                f"--config.file={config}",
                f"--storage.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.external-url={self.url}",
                "--cluster.listen-address=",
            ],
            self.workdir / "alertmanager.log",
        )
        self.process.start()
        if not wait_until(self.ready, timeout, interval=0.2):
            tail = self.process.log_tail()
            self.stop()
            raise RuntimeError(f"alertmanager did not become ready in {timeout:.0f} s:\n{tail}")

    def ready(self) -> bool:
        if self.process is not None and not self.process.alive():
            raise RuntimeError(f"alertmanager exited ({self.process.returncode()}):\n{self.process.log_tail()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def alerts(self) -> list[dict[str, Any]]:
        """GET /api/v2/alerts: every alert it holds, with status.state active/suppressed and status.inhibitedBy."""
        with urllib.request.urlopen(self.url + "/api/v2/alerts", timeout=5) as r:
            return json.load(r)

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """POST /api/v2/alerts, as Prometheus sends them (labels, annotations, startsAt/endsAt)."""
        req = urllib.request.Request(
            self.url + "/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=5).close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=10, sig=signal.SIGTERM)
