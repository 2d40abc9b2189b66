"""`vllm-rocm-health serve` as a real child process, polled over HTTP: for the bench and the tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from vllm_rocm_qualify.processes import free_port  # noqa: F401  (the one implementation; tests and bench take it from here)


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class SidecarProcess:
    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """`command`: how to start `vllm-rocm-health` (default: this interpreter's module; the wheel tests give the
        installed console script)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._out = open(log_path, "wb")  # noqa: SIM115
        command = command or [sys.executable, "-m", "vllm_rocm_health"]
        self.proc = subprocess.Popen(
            [*command, "serve", "--listen", f"127.0.0.1:{self.port}", *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
        )
        # Generous: a Python start with its imports takes ~1 s idle and several times that on a loaded machine.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._out.close()
                raise RuntimeError(f"sidecar exited {self.proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if get(self.url + "/healthz", 2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"sidecar did not answer /healthz within 90 s: {log_path.read_text()[-2000:]}")

    def metrics(self) -> str:
        return get(self.url + "/metrics")[1].decode()

    def value(self, name: str) -> float | None:
        for line in self.metrics().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples called `name` whose labels include `labels` (e.g. runs of one outcome)."""
        total = 0.0
        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def ready(self) -> tuple[int, dict]:
        code, body = get(self.url + "/readyz")
        return code, json.loads(body)

    def wait_for(self, pred: Callable[[], object], timeout: float = 60.0, poll: float = 0.2) -> bool:
        # The bound only ends a wait that will not succeed: a state the sidecar reaches in well under a second idle
        # took several seconds beside a CI run on the 2 shared cores.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(poll)
        return bool(pred())

    def stop(self) -> int:
        self.proc.terminate()
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(5)
        self._out.close()
        return rc
