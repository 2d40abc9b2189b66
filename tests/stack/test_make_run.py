"""`make run`'s underlying command, for real: vLLM (CPU) + the sidecar + Prometheus with the shipped alert rules.
Started in the background, checked for readiness, metrics in Prometheus, no alert firing or pending at any time,
banner links that answer, and every panel of the Grafana dashboard evaluated against this Prometheus; then stopped
with Ctrl-C (SIGINT) and checked to leave nothing behind."""
from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from vllm_rocm_stack import dashboard
from vllm_rocm_stack.config import WORK

from tests.support.sidecar import free_port, get

pytestmark = pytest.mark.live


def prom(port: int, path: str, **params: str) -> dict:
    q = ("?" + urllib.parse.urlencode(params)) if params else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}{q}", timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def banner_urls(text: str) -> list[str]:
    """The URLs of the 'Where to look' lines (the curl example after them is not a link)."""
    block = text.split("Where to look:", 1)[1].split("  Grafana", 1)[0]
    return re.findall(r"http://\S+", block)


def panel_data(port: int) -> dict[str, tuple[bool, int]]:
    """panel query -> (GPU-only, finite values it returns now), as Grafana would ask with the defaults."""
    out = {}
    now = time.time()
    for q in dashboard.panel_queries(json.loads(dashboard.JSON_PATH.read_text())):
        expr = dashboard.for_prometheus(q.expr)
        if q.instant:
            data = prom(port, "/api/v1/query", query=expr)
            assert data["resultType"] == "vector", (expr, data)
            values = [float(r["value"][1]) for r in data["result"]]
        else:
            data = prom(port, "/api/v1/query_range", query=expr, start=f"{now - 300:.3f}", end=f"{now:.3f}", step="5")
            assert data["resultType"] == "matrix", (expr, data)
            values = [float(v[1]) for r in data["result"] for v in r["values"]]
        out[f"{q.panel}: {q.expr}"] = (q.gpu_only, sum(1 for v in values if math.isfinite(v)))
    return out


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
        stdout=out, stderr=subprocess.STDOUT,
        # started as a shell's background job would be (SIGINT ignored): Ctrl-C / SIGINT must still stop it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
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
        deadline = time.monotonic() + 120  # the banner comes once Prometheus scraped everything and loaded the rules
        while "Press Ctrl-C to stop everything." not in text() and time.monotonic() < deadline:
            assert proc.poll() is None, f"stack exited early:\n{text()[-3000:]}"
            time.sleep(0.5)
        assert "Press Ctrl-C to stop everything." in text(), text()[-3000:]
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
        # Every dashboard panel answers; GPU-only ones (capture) at least parse and evaluate. The canary's series
        # need a run after Prometheus started: wait up to three canary intervals for them.
        deadline = time.monotonic() + 3 * 30 + 30
        while True:
            data = panel_data(ports["prometheus"])
            empty = [k for k, (gpu_only, n) in data.items() if not gpu_only and n == 0]
            if not empty or time.monotonic() > deadline:
                break
            time.sleep(3)
        assert not empty, f"dashboard queries without data on the running stack: {empty}"
        # A healthy start raises no alert at all, not even a pending one, at any time since Prometheus started
        # (ALERTS has a sample for every evaluation in which an alert was pending or firing).
        assert prom(ports["prometheus"], "/api/v1/alerts")["alerts"] == []
        ever = prom(ports["prometheus"], "/api/v1/query", query="max_over_time(ALERTS[1h])")["result"]
        assert ever == [], f"alerts were pending or firing during a healthy start: {ever}"
        active = prom(ports["prometheus"], "/api/v1/targets")["activeTargets"]
        targets = {t["labels"]["job"]: t["health"] for t in active}
        assert targets.get("vllm-rocm-health") == "up"
        # The status line the user sees reports it too (printed every --status-interval seconds).
        deadline = time.monotonic() + 10
        while "ready=yes" not in text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "ready=yes" in text()
        status_lines = [ln for ln in text().splitlines() if "alerts firing=" in ln]
        assert status_lines and all("firing=none pending=none" in ln for ln in status_lines), status_lines
        # The banner prints only links that answer; each is fetched here as a person would.
        urls = banner_urls(text())
        assert "(not answering)" not in text() and len(urls) >= 7, text()[-3000:]
        for url in urls:
            code, body = get(url)
            # /readyz answers 503 with a reason while not ready; every other link answers 200
            assert code == 200 or (url.endswith("/readyz") and code == 503 and b"reason" in body), (url, code)
        provisioning = tmp_path / "run" / "grafana" / "provisioning"
        assert f"GF_PATHS_PROVISIONING={provisioning}" in text()
        assert (provisioning / "datasources" / "prometheus.yaml").is_file()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(90)
        except subprocess.TimeoutExpired:  # never leave vLLM behind: SIGTERM stops the children too, then SIGKILL
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            rc = None
        out.close()
    assert rc == 0, f"Ctrl-C (SIGINT) did not stop the stack cleanly (rc {rc}):\n{text()[-3000:]}"
    assert "stopped" in text()
    for name, port in ports.items():
        assert not port_open(port), f"{name} still listening on {port} after Ctrl-C"
