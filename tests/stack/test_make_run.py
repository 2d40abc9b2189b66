"""`make run`'s underlying command, for real: vLLM (CPU) + the sidecar + Prometheus with the shipped alert rules.
Started in the background, checked for readiness, metrics in Prometheus and no firing alert, then stopped with
Ctrl-C (SIGINT) and checked to leave nothing behind."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from vllm_rocm_stack.config import WORK

from tests.support.sidecar import free_port, get

pytestmark = pytest.mark.live


def prom(port: int, path: str, **params: str) -> dict:
    q = ("?" + urllib.parse.urlencode(params)) if params else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}{q}", timeout=5) as r:
        return json.load(r)["data"]


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_make_run_stack(tmp_path: Path) -> None:
    if not (WORK / "models" / "smollm2-135m-instruct" / "config.json").is_file():
        pytest.skip("model missing: run `make setup-vllm`")
    ports = {"vllm": free_port(), "sidecar": free_port(), "prometheus": free_port()}
    out = open(tmp_path / "stack.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_rocm_stack", "run", "--workdir", str(tmp_path / "run"),
         "--vllm-port", str(ports["vllm"]), "--sidecar-port", str(ports["sidecar"]),
         "--prometheus-port", str(ports["prometheus"]), "--canary-interval", "30", "--status-interval", "2"],
        stdout=out, stderr=subprocess.STDOUT)
    text = lambda: (tmp_path / "stack.out").read_text(errors="replace")  # noqa: E731
    try:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"stack exited early:\n{text()[-3000:]}"
            if port_open(ports["sidecar"]) and get(f"http://127.0.0.1:{ports['sidecar']}/readyz")[0] == 200:
                break
            time.sleep(1)
        else:
            pytest.fail(f"sidecar never ready:\n{text()[-3000:]}")
        assert "no canary baseline yet: recording one" in text()
        # Prometheus scrapes the sidecar and evaluates the shipped rules; a healthy stack fires nothing.
        deadline = time.monotonic() + 30
        ready = []
        while time.monotonic() < deadline and not ready:
            ready = prom(ports["prometheus"], "/api/v1/query", query="vllm_sidecar_ready == 1")["result"]
            time.sleep(1)
        assert ready, "Prometheus never saw vllm_sidecar_ready == 1"
        score = prom(ports["prometheus"], "/api/v1/query", query="vllm_canary_passing")["result"]
        assert score and score[0]["value"][1] == "1"
        rules = [r for g in prom(ports["prometheus"], "/api/v1/rules")["groups"] for r in g["rules"]]
        assert len(rules) >= 7 and all(r["health"] == "ok" for r in rules), rules
        firing = [a for a in prom(ports["prometheus"], "/api/v1/alerts")["alerts"] if a["state"] == "firing"]
        assert firing == []
        active = prom(ports["prometheus"], "/api/v1/targets")["activeTargets"]
        targets = {t["labels"]["job"]: t["health"] for t in active}
        assert targets.get("vllm-rocm-health") == "up"
        # The status line the user sees reports it too (printed every --status-interval seconds).
        deadline = time.monotonic() + 10
        while "ready=yes" not in text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "ready=yes" in text()
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(90)
        out.close()
    assert rc == 0, text()[-3000:]
    assert "stopped" in text()
    for name, port in ports.items():
        assert not port_open(port), f"{name} still listening on {port} after Ctrl-C"
