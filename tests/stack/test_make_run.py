"""`make run`'s underlying command, for real: vLLM (CPU) + the sidecar + Prometheus with the shipped alert rules +
Alertmanager with the shipped routing + the stack's webhook receiver. Started in the background, checked for
readiness, metrics in Prometheus, no alert firing or pending at any time of a healthy start, banner links that answer,
and every panel of the Grafana dashboard evaluated against this Prometheus; then an alert's whole life: the sidecar's
server (behind a proxy) turns into one that answers wrong tokens, the canary alert fires in Prometheus and its
notification reaches the receiver's notifications.jsonl, the good server comes back and the resolution arrives too.
Then a pod held out of the Service: the proxy answers vLLM's /health with 503, the sidecar holds the pod out
(health_failing), VllmPodHeldOut fires for that reason after its hold (shortened by --hold-for, nothing else is) and
reaches the warning receiver, the dashboard's held-out panel shows it, /health answers again, the pod is Ready and the
resolution arrives; the pod having gone in and out twice, VllmPodFlapping goes pending.
Finally stopped with Ctrl-C (SIGINT) and checked to leave nothing behind, Alertmanager and receiver included."""

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
from vllm_rocm_stack.alertmanager import notifications
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.proxy import SwitchableProxy

from tests.support.canary import CanaryTiming
from tests.support.sidecar import free_port, get
from tests.support.vllm_server import VllmServer

# host: `make test` runs it in its integration session (tools/src/vllm_rocm_stack/testrun.py, SESSIONS).
pytestmark = [pytest.mark.system, pytest.mark.host]


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


RUNBOOK = Path(__file__).resolve().parents[2] / "charts" / "vllm-rocm" / "docs" / "runbook.md"
CANARY_FAILURES = ("VllmCanaryScoreBelowThreshold", "VllmCanaryFingerprintDrift")
# --alert-for: one evaluation interval of the stack's Prometheus (2 s): a rule fires on its second true evaluation.
ALERT_FOR = "2s"
# --hold-for: the hold of the one reason this test induces. Longer than a /health poll that times out now and then on
# a busy machine (--health-interval 5 s, --health-timeout 3 s), so that the healthy phases never reach it.
HOLD = "20s"


def notified(path: Path, alertname: str, instance: str, status: str) -> list[tuple[dict, dict]]:
    """(payload, alert) of each notification in the receiver's file that carries that alert in that status."""
    return [
        (p, a)
        for p in notifications(path)
        for a in p["alerts"]
        if a["labels"].get("alertname") == alertname
        and a["labels"].get("instance") == instance
        and a["status"] == status
    ]


# Bounded by its own waits instead: the stack's start (480 s), then some ten waits of a measured canary patience each.
@pytest.mark.timeout(2400)
def test_make_run_stack(tmp_path: Path, vllm_perturbed_server: VllmServer, canary_timing: CanaryTiming) -> None:
    if not (WORK / "models" / "smollm2-135m-instruct" / "config.json").is_file():
        pytest.skip("model missing: run `make setup-vllm`")
    ports = {
        "vllm": free_port(),
        "sidecar": free_port(),
        "prometheus": free_port(),
        "alertmanager": free_port(),
        "receiver": free_port(),
    }
    # The sidecar checks the stack's vLLM through a proxy, which the test later points at the perturbed server.
    good = f"http://127.0.0.1:{ports['vllm']}"
    proxy = SwitchableProxy(good)
    # Measured canary runs (canary_timing) give the interval; every wait below is a number of those.
    interval = max(1, math.ceil(canary_timing.interval))
    out = open(tmp_path / "stack.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_rocm_stack",
            "run",
            "--workdir",
            str(tmp_path / "run"),
            "--vllm-port",
            str(ports["vllm"]),
            "--sidecar-port",
            str(ports["sidecar"]),
            "--prometheus-port",
            str(ports["prometheus"]),
            "--alertmanager-port",
            str(ports["alertmanager"]),
            "--receiver-port",
            str(ports["receiver"]),
            "--sidecar-vllm-url",
            proxy.url,
            "--alert-for",
            ALERT_FOR,
            "--hold-for",
            f"health_failing={HOLD}",
            "--canary-interval",
            str(interval),
            "--status-interval",
            "2",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        # started as a shell's background job would be (SIGINT ignored): Ctrl-C / SIGINT must still stop it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
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
        deadline = time.monotonic() + canary_timing.patience
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
        notes = tmp_path / "run" / "notifications.jsonl"
        assert f"notifications       {notes}" in text(), text()[-3000:]
        assert proxy.count("/v1/completions") > 0, "the sidecar's canary does not go through the proxy"

        # An alert's whole life. Wrong tokens behind the sidecar's URL: the canary fails, its alert fires in
        # Prometheus, Alertmanager routes it (severity critical) to the stack's receiver.
        assert notifications(notes) == [], "a healthy start notified something"
        instance = f"127.0.0.1:{ports['sidecar']}"
        t0 = time.monotonic()
        proxy.switch(vllm_perturbed_server.base_url)

        def firing_in_prometheus() -> set[str]:
            return {
                a["labels"]["alertname"]
                for a in prom(ports["prometheus"], "/api/v1/alerts")["alerts"]
                if a["state"] == "firing" and a["labels"].get("instance") == instance
            }

        deadline = time.monotonic() + canary_timing.patience
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"stack exited early:\n{text()[-3000:]}"
            if "VllmCanaryFingerprintDrift" in firing_in_prometheus() and notified(
                notes, "VllmCanaryFingerprintDrift", instance, "firing"
            ):
                break
            time.sleep(1)
        else:
            pytest.fail(
                f"no firing VllmCanaryFingerprintDrift in Prometheus ({firing_in_prometheus()}) and in "
                f"{notes} ({notifications(notes)}) within {canary_timing.patience:.0f} s:\n{text()[-3000:]}"
            )
        fired = time.monotonic() - t0
        payload, alert = notified(notes, "VllmCanaryFingerprintDrift", instance, "firing")[0]
        assert payload["receiver"] == "vllm-rocm-critical" and payload["status"] == "firing", payload
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["job"] == "vllm-rocm-health", alert
        assert instance in alert["annotations"]["summary"] and "drift" in alert["annotations"]["summary"].lower()
        assert alert["annotations"]["description"], alert
        runbook = alert["annotations"]["runbook_url"]
        assert runbook == "charts/vllm-rocm/docs/runbook.md#vllmcanaryfingerprintdrift", runbook
        assert "\n## VllmCanaryFingerprintDrift\n" in RUNBOOK.read_text()
        assert f"notification to vllm-rocm-critical: VllmCanaryFingerprintDrift firing on {instance}" in text()
        # Alerts that fired meanwhile: only the canary's; a stale canary is muted by its failure (inhibit rule).
        fired_names = {
            m["metric"]["alertname"]
            for m in prom(ports["prometheus"], "/api/v1/query", query='max_over_time(ALERTS{alertstate="firing"}[1h])')[
                "result"
            ]
        }
        assert fired_names <= {*CANARY_FAILURES, "VllmCanaryStale"}, fired_names
        assert not notified(notes, "VllmCanaryStale", instance, "firing"), notifications(notes)

        # The good server is back: the next canary passes, the alert resolves, the receiver hears it.
        proxy.switch(good)
        t1 = time.monotonic()
        deadline = time.monotonic() + canary_timing.patience
        while time.monotonic() < deadline and not notified(notes, "VllmCanaryFingerprintDrift", instance, "resolved"):
            assert proc.poll() is None, f"stack exited early:\n{text()[-3000:]}"
            time.sleep(1)
        resolved = notified(notes, "VllmCanaryFingerprintDrift", instance, "resolved")
        assert resolved, f"no resolved notification within {canary_timing.patience:.0f} s: {notifications(notes)}"
        assert resolved[0][0]["receiver"] == "vllm-rocm-critical"
        assert "VllmCanaryFingerprintDrift" not in firing_in_prometheus()
        assert f"notification to vllm-rocm-critical: VllmCanaryFingerprintDrift resolved on {instance}" in text()
        print(
            f"fire -> notify {fired:.0f} s, resolve -> notify {time.monotonic() - t1:.0f} s "
            f"(canary interval {interval} s, run {canary_timing.run:.1f} s)"
        )

        # A pod held out of the Service. The sidecar has been Ready again since the canary passed on the good server;
        # now vLLM's /health answers 503 (through the proxy): the sidecar holds the pod out with health_failing, and
        # once it has not been Ready for the hold, VllmPodHeldOut fires for that reason and goes to the warning
        # receiver. Nothing held out has been notified before.
        sidecar = f"http://127.0.0.1:{ports['sidecar']}"
        deadline = time.monotonic() + canary_timing.patience
        while get(sidecar + "/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(1)
        assert get(sidecar + "/readyz")[0] == 200, "the sidecar is not Ready again after the good server came back"
        assert not notified(notes, "VllmPodHeldOut", instance, "firing"), notifications(notes)

        def held_out() -> list[dict]:
            return [
                a
                for a in prom(ports["prometheus"], "/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] == "VllmPodHeldOut" and a["labels"].get("instance") == instance
            ]

        t2 = time.monotonic()
        proxy.fault = "5xx"
        deadline = time.monotonic() + canary_timing.patience
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"stack exited early:\n{text()[-3000:]}"
            if any(a["state"] == "firing" for a in held_out()) and notified(
                notes, "VllmPodHeldOut", instance, "firing"
            ):
                break
            time.sleep(1)
        else:
            pytest.fail(
                f"no firing VllmPodHeldOut in Prometheus ({held_out()}) and in {notes} ({notifications(notes)}) "
                f"within {canary_timing.patience:.0f} s of /health failing:\n{text()[-3000:]}"
            )
        held_fired = time.monotonic() - t2
        code, body = get(sidecar + "/readyz")
        assert code == 503 and b"/health is failing" in body, (code, body)  # /readyz gives the message
        metrics = get(sidecar + "/metrics")[1].decode()
        assert 'vllm_sidecar_not_ready_reason{reason="health_failing"} 1.0' in metrics, metrics[-3000:]
        [firing] = [a for a in held_out() if a["state"] == "firing"]
        assert firing["labels"]["reason"] == "health_failing" and firing["labels"]["severity"] == "warning", firing
        payload, alert = notified(notes, "VllmPodHeldOut", instance, "firing")[0]
        assert payload["receiver"] == "vllm-rocm-warning", payload
        assert alert["labels"]["reason"] == "health_failing" and alert["labels"]["job"] == "vllm-rocm-health", alert
        assert (
            alert["annotations"]["summary"] == f"{instance} not Ready for more than {HOLD}, held out by health_failing"
        )
        assert alert["annotations"]["runbook_url"] == "charts/vllm-rocm/docs/runbook.md#health_failing"
        assert "\n### `health_failing`\n" in RUNBOOK.read_text()
        assert f"notification to vllm-rocm-warning: VllmPodHeldOut(health_failing) firing on {instance}" in text()
        # The dashboard's panel of held-out pods shows this one under its reason, and no Ready pod.
        [panel] = [
            q
            for q in dashboard.panel_queries(json.loads(dashboard.JSON_PATH.read_text()))
            if q.panel == "Pods ready and held out, by reason"
        ]
        shown = {
            r["metric"].get("reason"): float(r["value"][1])
            for r in prom(ports["prometheus"], "/api/v1/query", query=dashboard.for_prometheus(panel.expr))["result"]
        }
        assert shown == {"health_failing": 1.0, "ready": 0.0}, shown

        # /health answers again: the outage voided the last canary pass, the canary runs at once on the good server,
        # the pod is Ready, and the alert resolves (its keep_firing_for is the shortened hold too).
        proxy.fault = None
        t3 = time.monotonic()
        deadline = time.monotonic() + canary_timing.patience
        while time.monotonic() < deadline and not notified(notes, "VllmPodHeldOut", instance, "resolved"):
            assert proc.poll() is None, f"stack exited early:\n{text()[-3000:]}"
            time.sleep(1)
        resolved = notified(notes, "VllmPodHeldOut", instance, "resolved")
        assert resolved, f"no resolved VllmPodHeldOut within {canary_timing.patience:.0f} s: {notifications(notes)}"
        assert (
            resolved[0][0]["receiver"] == "vllm-rocm-warning" and resolved[0][1]["labels"]["reason"] == "health_failing"
        )
        assert f"notification to vllm-rocm-warning: VllmPodHeldOut(health_failing) resolved on {instance}" in text()
        deadline = time.monotonic() + canary_timing.patience
        while get(sidecar + "/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(1)
        assert get(sidecar + "/readyz")[0] == 200, "the sidecar is not Ready again after /health came back"
        # Only the induced reason was held out long enough to fire; no other held-out or release-wide alert fired.
        ever = prom(ports["prometheus"], "/api/v1/query", query='max_over_time(ALERTS{alertstate="firing"}[1h])')
        fired_readiness = {
            (m["metric"]["alertname"], m["metric"].get("reason", ""))
            for m in ever["result"]
            if m["metric"]["alertname"] in ("VllmPodHeldOut", "VllmPodFlapping", "VllmDeploymentNoReadyPod")
        }
        assert fired_readiness <= {("VllmPodHeldOut", "health_failing"), ("VllmPodFlapping", "")}, fired_readiness
        # In and out of the Service twice (the wrong answers, then /health): the fourth change makes it flapping.
        deadline = time.monotonic() + 60
        flapping: list[dict] = []
        while not flapping and time.monotonic() < deadline:
            flapping = [
                a
                for a in prom(ports["prometheus"], "/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] == "VllmPodFlapping" and a["labels"].get("instance") == instance
            ]
            time.sleep(1)
        assert flapping, "VllmPodFlapping neither pending nor firing after the pod went in and out twice"
        print(
            f"held out -> fired and notified {held_fired:.0f} s (hold {HOLD}), back -> resolved "
            f"{time.monotonic() - t3:.0f} s"
        )
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
        proxy.close()
    assert rc == 0, f"Ctrl-C (SIGINT) did not stop the stack cleanly (rc {rc}):\n{text()[-3000:]}"
    assert "stopped" in text()
    for name, port in ports.items():
        assert not port_open(port), f"{name} still listening on {port} after Ctrl-C"
