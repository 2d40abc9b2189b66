"""One vLLM server under test: started from the command template, followed through its log until ready."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from .logs import LogFollower, why_it_failed
from .processes import ManagedProcess


def server_env(cache: Path) -> dict[str, str]:
    """The environment a server under test runs with: this one, offline (nothing from a model hub), and the
    compile caches under `cache` so that modes share them and nothing is written elsewhere."""
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CACHE_ROOT": str(cache / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "HF_HOME": str(cache / "hf"),
        }
    )
    return env


# How a server that could not bind its port ends (Python's OSError text for EADDRINUSE on Linux).
PORT_TAKEN = "Address already in use"


class StartFailed(Exception):
    """The server exited or did not become ready; the message says why, in the log's words."""


class ModeServer:
    def __init__(
        self, label: str, argv: list[str], log_path: Path, env: dict[str, str], base_url: str, requested: str
    ) -> None:
        self.label = label
        self.base_url = base_url
        self.port = urllib.parse.urlsplit(base_url).port
        self.foreign = False  # /health answered before the server's log said it serves
        self.log_path = log_path
        log_path.unlink(missing_ok=True)  # one run per file: the parser must see one server's start only
        self.process = ManagedProcess(f"vLLM {label}", argv, log_path, env=env)
        self.log = LogFollower(log_path, requested)
        self.ready_seconds = 0.0
        self.t0 = time.monotonic()
        # The server's process group while it runs: what an outside supervisor (a test) must stop if we die.
        self.pid_path = log_path.with_suffix(".pid")

    def _health(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def launch(self) -> None:
        """Start the process (from the main thread: a child started there dies with qualify, even by SIGKILL)."""
        self.t0 = time.monotonic()
        try:
            self.process.start()
        except OSError as e:
            raise StartFailed(f"cannot run {self.process.argv[0]}: {e.strerror or e}") from e
        self.pid_path.write_text(f"{self.process.pid}\n")

    def _ours(self) -> bool:
        """Whether the server's own log says it serves: only then is what answers on its port this server. The port
        was free when it was chosen; until the server (or the container runtime of a `docker run -p {port}:8000`
        command) binds it, any process may be given it (run 34 of the test suite: a test's HTTP stub answered
        /health there, 17 s into a vLLM start, and was measured). vLLM binds its socket before it loads the model
        and logs the line when it serves on it, so a server that says so holds the port; one that could not bind it
        exits. The line names the port inside a container, which may differ from ours: any port counts."""
        self.log.poll()
        return bool(self.log.serving_on)

    def wait_ready(self, timeout: float) -> None:
        """Follow the log until /health answers and the log says the server serves; StartFailed when the process
        exits or `timeout` passes."""
        while True:
            self.log.poll()
            if not self.process.alive():
                self.log.finish()
                tail = self.process.log_tail(60)
                why = why_it_failed(tail)
                if PORT_TAKEN in tail:
                    why = f"port {self.port} was taken by another process before the server bound it ({why})"
                raise StartFailed(f"exited with code {self.process.returncode()} before ready: {why}")
            if self._health():
                if self._ours():
                    self.ready_seconds = time.monotonic() - self.t0
                    return
                self.foreign = True
            if time.monotonic() - self.t0 > timeout:
                self.log.finish()
                if self.foreign:
                    raise StartFailed(
                        f"not ready within {timeout:.0f} s: /health on port {self.port} answered, but the server's "
                        "log never said it serves (vLLM logs 'Starting vLLM server on ...' at INFO): another process "
                        "answers on that port"
                    )
                raise StartFailed(
                    f"not ready within {timeout:.0f} s ({self.log.progress()}): "
                    f"{why_it_failed(self.process.log_tail(20))}"
                )
            time.sleep(0.5)

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self) -> int | None:
        # SIGINT is vLLM's clean shutdown; the engine core needs a few seconds, a container a few more.
        code = self.process.stop(timeout=60)
        self.pid_path.unlink(missing_ok=True)
        self.log.finish()
        return code
