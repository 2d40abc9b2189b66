"""The alerting parts of `make run` without a vLLM: the routing it gives Alertmanager (checked by the real amtool), the
rules copy of --alert-for and --hold-for (checked by promtool, and the shortened held-out alert run by promtool at the
stack's 2 s evaluation), the webhook receiver over real HTTP, settings refused before anything starts, and a start
that fails at Alertmanager stopping what it had started."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from vllm_rocm_stack.alertmanager import (
    EXAMPLE_CONFIG,
    AlertmanagerServer,
    WebhookReceiver,
    local_config,
    notifications,
)
from vllm_rocm_stack.config import StackConfig
from vllm_rocm_stack.prometheus import rules_with_for
from vllm_rocm_stack.readiness_alerts import GROUP
from vllm_rocm_stack.stack import ALERT_RULES, Stack, local_rules

from tests.support.sidecar import free_port


def need(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} not on PATH: `make setup` installs it (Debian package)")
    return found


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_local_config_sends_every_receiver_to_the_stacks_receiver(tmp_path: Path) -> None:
    shipped = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    local = local_config(shipped, "http://127.0.0.1:9095/", timing="2s")
    assert [r["name"] for r in local["receivers"]] == [r["name"] for r in shipped["receivers"]]
    for r in local["receivers"]:
        assert r["webhook_configs"] == [{"url": f"http://127.0.0.1:9095/{r['name']}", "send_resolved": True}]
    routes = [local["route"], *local["route"]["routes"]]
    assert all(r["group_wait"] == r["group_interval"] == "2s" for r in routes)
    # Routes, grouping and inhibitions are the shipped ones; the shipped file itself is untouched.
    assert [r["matchers"] for r in local["route"]["routes"]] == [r["matchers"] for r in shipped["route"]["routes"]]
    assert local["inhibit_rules"] == shipped["inhibit_rules"]
    assert local_config(shipped, "http://x:1")["route"]["group_wait"] == shipped["route"]["group_wait"] == "30s"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(local))
    res = subprocess.run([need("amtool"), "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_alert_for_copy_changes_only_the_for(tmp_path: Path) -> None:
    copy = rules_with_for(ALERT_RULES, tmp_path / "rules.yaml", "3s")
    res = subprocess.run([need("promtool"), "check", "rules", str(copy)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    shipped, short = (yaml.safe_load(p.read_text()) for p in (ALERT_RULES, copy))
    assert len(short["groups"]) == len(shipped["groups"])
    for g_ship, g_short in zip(shipped["groups"], short["groups"], strict=True):
        for r_ship, r_short in zip(g_ship["rules"], g_short["rules"], strict=True):
            assert r_short["for"] == "3s"
            assert {k: v for k, v in r_short.items() if k != "for"} == {k: v for k, v in r_ship.items() if k != "for"}


def test_stack_rules_copy_shortens_only_what_it_is_asked(tmp_path: Path) -> None:
    """--alert-for sets the `for:` of every rule but the readiness ones (a start holds every pod out for a while:
    shortened, they would fire at each start); --hold-for regenerates just the named reasons' rules with that hold."""
    copy = local_rules(tmp_path / "rules.yaml", alert_for="3s", hold_for="health_failing=6s")
    res = subprocess.run([need("promtool"), "check", "rules", str(copy)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    shipped, short = (yaml.safe_load(p.read_text())["groups"] for p in (ALERT_RULES, copy))
    assert [g["name"] for g in short] == [g["name"] for g in shipped]
    for g_ship, g_short in zip(shipped, short, strict=True):
        for r_ship, r_short in zip(g_ship["rules"], g_short["rules"], strict=True):
            if g_ship["name"] != GROUP:
                assert r_short == {**r_ship, "for": "3s"}
            elif r_ship["labels"].get("reason") == "health_failing":
                assert (r_short["for"], r_short["keep_firing_for"]) == ("6s", "6s")
                assert "[6s]" in r_short["expr"] and "offset 6s" in r_short["expr"]
                assert r_short["labels"] == r_ship["labels"]
            else:
                assert r_short == r_ship
    # Neither flag: the rules as shipped.
    assert local_rules(tmp_path / "same.yaml").read_text() == ALERT_RULES.read_text()


def test_shortened_hold_fires_and_resolves_at_the_stacks_pace(tmp_path: Path) -> None:
    """What the `make run` test relies on, with promtool at the stack's 2 s scrape and evaluation: /health fails for
    20 s on a pod Ready before; VllmPodHeldOut(health_failing) fires within the hold + its `for:` and resolves within
    its keep_firing_for of the reason clearing (here to canary_pending, as after a /health outage)."""
    copy = local_rules(tmp_path / "rules.yaml", hold_for="health_failing=6s")
    sel = 'job="vllm-rocm-health", instance="s:9400"'
    labels = {"severity": "warning", "reason": "health_failing", "job": "vllm-rocm-health", "instance": "s:9400"}
    [rule] = [
        r
        for g in yaml.safe_load(copy.read_text())["groups"]
        for r in g["rules"]
        if r["labels"].get("reason") == "health_failing"
    ]
    annotations = {
        "summary": "s:9400 not Ready for more than 6s, held out by health_failing",
        "description": rule["annotations"]["description"],
        "runbook_url": "charts/vllm-rocm/docs/runbook.md#health_failing",
    }
    series = [  # a sample every 2 s: Ready until 18 s, /health failing 20-38 s, canary_pending 40-46 s, Ready from 48 s
        {"series": f"vllm_sidecar_ready{{{sel}}}", "values": "1x9 0x13 1x10"},
        {"series": f'vllm_sidecar_not_ready_reason{{{sel}, reason="health_failing"}}', "values": "0x9 1x9 0x14"},
        {"series": f'vllm_sidecar_not_ready_reason{{{sel}, reason="canary_pending"}}', "values": "0x19 1x3 0x10"},
    ]

    def at(seconds: int, firing: bool) -> dict:
        exp = [{"exp_labels": labels, "exp_annotations": annotations}] if firing else []
        return {"eval_time": f"{seconds}s", "alertname": "VllmPodHeldOut", "exp_alerts": exp}

    test = {
        "rule_files": [str(copy)],
        "evaluation_interval": "2s",
        "tests": [
            {
                "interval": "2s",
                "input_series": series,
                # the window is all not-Ready from 26 s, +6 s `for:`; last true at 38 s, +6 s keep_firing_for
                "alert_rule_test": [at(30, False), at(32, True), at(44, True), at(46, False), at(60, False)],
            }
        ],
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(test))
    res = subprocess.run([need("promtool"), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_webhook_receiver_appends_each_notification(tmp_path: Path) -> None:
    lines: list[str] = []
    out = tmp_path / "notifications.jsonl"
    receiver = WebhookReceiver(free_port(), out, say=lines.append)
    receiver.start()
    try:
        payload = {
            "receiver": "vllm-rocm-critical",
            "status": "firing",
            "alerts": [
                {"status": "firing", "labels": {"alertname": "VllmCanaryFingerprintDrift", "instance": "a:9400"}},
                {"status": "resolved", "labels": {"alertname": "VllmHealthSidecarAbsent"}},
                {
                    "status": "firing",
                    "labels": {"alertname": "VllmPodHeldOut", "reason": "health_failing", "instance": "b:9400"},
                },
            ],
        }
        assert post(receiver.url + "/vllm-rocm-critical", json.dumps(payload).encode()) == 200
        assert post(receiver.url + "/x", b"{not json") == 400
        assert post(receiver.url + "/x", b"[1, 2]") == 400
        assert notifications(out) == [payload] and len(out.read_text().splitlines()) == 1
        assert lines == [
            "notification to vllm-rocm-critical: VllmCanaryFingerprintDrift firing on a:9400; "
            "VllmHealthSidecarAbsent resolved on (no instance); VllmPodHeldOut(health_failing) firing on b:9400"
        ]
        with urllib.request.urlopen(receiver.url + "/", timeout=10) as r:
            assert r.status == 200 and str(out) in r.read().decode()
        assert receiver.count == 1
    finally:
        receiver.stop()
    assert not port_open(receiver.port)


def test_alertmanager_refusing_its_config_is_an_error_not_a_hang(tmp_path: Path) -> None:
    need("prometheus-alertmanager")
    bad = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    bad["route"]["receiver"] = "nobody"
    am = AlertmanagerServer(tmp_path / "am", free_port(), bad)
    with pytest.raises(RuntimeError, match="nobody"):
        am.start(timeout=120)
    assert am.process is not None and not am.process.alive()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--alert-for", "0s"], "not a positive duration"),
        (["--alert-for", "soon"], "not a positive duration"),
        (["--sidecar-vllm-url", "127.0.0.1:8000"], "not an http(s) URL"),
        (["--alertmanager-port", "9400"], "two services on one port"),
        (["--hold-for", "health_failing"], "--hold-for"),
        (["--hold-for", "no_such_reason=5s"], "REASON=DURATION"),
        (["--hold-for", "health_failing=soon"], "REASON=DURATION"),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(args: list[str], message: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack", "run", "--workdir", str(tmp_path / "run"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and message in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "run").exists(), "something was started or written"


def test_a_start_failing_at_alertmanager_stops_what_it_started(tmp_path: Path) -> None:
    """The stack's start order up to Alertmanager, without a vLLM: the receiver starts, Alertmanager cannot listen
    (its port is taken), the start fails with the reason, and shutdown leaves nothing listening."""
    need("prometheus-alertmanager")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = StackConfig(workdir=tmp_path / "run", receiver_port=free_port(), alertmanager_port=taken.getsockname()[1])
        stack = Stack(cfg)
        with pytest.raises(RuntimeError, match="alertmanager"):
            stack._start_alerting()
        assert stack.receiver is not None and port_open(cfg.receiver_port)
        stack.shutdown()  # what run_stack's finally does
        assert not port_open(cfg.receiver_port)
        assert stack.alertmanager.process is not None and not stack.alertmanager.process.alive()
