"""The Alertmanager routing the project ships, checked with the real Alertmanager tools (Debian's
prometheus-alertmanager: amtool and the server):

- docker/alertmanager/alertmanager.yml (compose, `make run`) as it is;
- charts/vllm-rocm/docs/alertmanager-route.yaml, an AlertmanagerConfig, as the configuration prometheus-operator makes
  of it (`operator_config` follows its pkg/alertmanager/amcfg.go: receivers prefixed with namespace/name/, a
  namespace matcher on the route and on both sides of each inhibit rule, `continue: true`, the route put first under
  the Alertmanager's own root route).

amtool checks both configurations and routes every alert of the rules file, with the labels it carries, to the
receiver of its severity; a real Alertmanager, fed alerts through its v2 API as Prometheus sends them, inhibits the
symptom alerts of an instance while VllmHealthSidecarDown fires for it (not another instance's), a failing canary
inhibits VllmCanaryStale, an alert that already says why a pod is held out inhibits VllmPodHeldOut for that reason
only, and VllmPodHeldOut inhibits VllmPodFlapping; the stack's own webhook receiver gets exactly the notifications that
are not inhibited. Every VllmPodHeldOut inhibition pairs a reason the sidecar has with alerts at least as loud."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_health.readiness import REASONS
from vllm_rocm_stack.alertmanager import (
    EXAMPLE_CONFIG,
    AlertmanagerServer,
    WebhookReceiver,
    local_config,
    notifications,
)

from tests.support.sidecar import free_port

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "charts" / "vllm-rocm" / "files" / "alerts.rules.yaml"
CHART_ROUTE = REPO / "charts" / "vllm-rocm" / "docs" / "alertmanager-route.yaml"
NAMESPACE = "llm"  # where the AlertmanagerConfig is applied: the release's namespace
SIDECAR_DOWN = "VllmHealthSidecarDown"
CANARY_FAILURES = ("VllmCanaryScoreBelowThreshold", "VllmCanaryFingerprintDrift")


def binary(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} not on PATH: install the Debian package prometheus-alertmanager (`make setup` does)")
    return found


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def rule_id(r: dict[str, Any]) -> str:
    """An alerting rule's name, with its static `reason` label if it has one (VllmPodHeldOut has a rule per reason)."""
    return r["alert"] + (f"/{r['labels']['reason']}" if "reason" in r["labels"] else "")


def static_labels(rid: str) -> dict[str, str]:
    """alertname and the rule's own labels (severity, and reason for VllmPodHeldOut), as the alert carries them."""
    rule = next(r for r in rules() if rule_id(r) == rid)
    return {"alertname": rule["alert"], **rule["labels"]}


# -- the AlertmanagerConfig as prometheus-operator turns it into Alertmanager configuration ----------------------
def _matcher(m: dict[str, Any]) -> str:
    op = m.get("matchType") or ("=~" if m.get("regex") else "=")
    return f'{m["name"]}{op}"{m.get("value", "")}"'


ROUTE_KEYS = {
    "groupBy": "group_by",
    "groupWait": "group_wait",
    "groupInterval": "group_interval",
    "repeatInterval": "repeat_interval",
    "continue": "continue",
}


def _route(r: dict[str, Any], prefix: str) -> dict[str, Any]:
    unknown = set(r) - {"receiver", "matchers", "routes", *ROUTE_KEYS}
    assert not unknown, f"operator_config does not translate route keys {unknown}: extend it"
    out: dict[str, Any] = {"receiver": prefix + r["receiver"]} if r.get("receiver") else {}
    out.update({ROUTE_KEYS[k]: v for k, v in r.items() if k in ROUTE_KEYS})
    if r.get("matchers"):
        out["matchers"] = [_matcher(m) for m in r["matchers"]]
    if r.get("routes"):
        out["routes"] = [_route(c, prefix) for c in r["routes"]]
    return out


def _receiver(r: dict[str, Any], prefix: str) -> dict[str, Any]:
    assert set(r) <= {"name", "webhookConfigs"}, f"operator_config translates webhookConfigs only, not {set(r)}"
    hooks = []
    for w in r.get("webhookConfigs", []):
        assert set(w) <= {"url", "sendResolved"}, w
        hooks.append({"url": w["url"], "send_resolved": w.get("sendResolved", True)})
    return {"name": prefix + r["name"], "webhook_configs": hooks}


def operator_config(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The Alertmanager configuration prometheus-operator generates from `doc` applied in `namespace`, under a root
    route of the Alertmanager's own (kube-prometheus-stack's default: everything else to the "null" receiver)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1alpha1" and doc["kind"] == "AlertmanagerConfig"
    prefix = f"{namespace}/{doc['metadata']['name']}/"
    ns = f'namespace="{namespace}"'
    spec = doc["spec"]
    top = _route(spec["route"], prefix)
    top["matchers"] = [*top.get("matchers", []), ns]
    top["continue"] = True
    inhibit = []
    for rule in spec.get("inhibitRules", []):
        inhibit.append(
            {
                "source_matchers": [*map(_matcher, rule.get("sourceMatch", [])), ns],
                "target_matchers": [*map(_matcher, rule.get("targetMatch", [])), ns],
                "equal": rule.get("equal", []),
            }
        )
    return {
        "route": {"receiver": "null", "group_by": ["namespace"], "routes": [top]},
        "receivers": [{"name": "null"}, *(_receiver(r, prefix) for r in spec["receivers"])],
        "inhibit_rules": inhibit,
    }


def chart_config() -> dict[str, Any]:
    return operator_config(yaml.safe_load(CHART_ROUTE.read_text()), NAMESPACE)


# config name -> (the Alertmanager configuration, the receiver name prefix, extra labels every alert carries)
CONFIGS = {
    "docker": (lambda: yaml.safe_load(EXAMPLE_CONFIG.read_text()), "", {}),
    "chart": (chart_config, f"{NAMESPACE}/vllm-rocm/", {"namespace": NAMESPACE}),
}


def written(name: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{name}-alertmanager.yml"
    path.write_text(yaml.safe_dump(CONFIGS[name][0](), sort_keys=False))
    return path


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("amtool"), *args], capture_output=True, text=True, timeout=60)


def routed(config: Path, labels: dict[str, str]) -> str:
    res = amtool("config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items()))
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.strip()


# -- what the routing keys on ----------------------------------------------------------------------------------
def test_every_rule_carries_what_the_routing_keys_on() -> None:
    """The routes match alertname=~"Vllm.+" (chart) and the severity label; a rule outside that would be routed by
    the default only (docker) or not at all (chart)."""
    ids = [rule_id(r) for r in rules()]
    assert len(ids) == len(set(ids)) >= 11 + len(REASONS)
    for r in rules():
        assert r["alert"].startswith("Vllm"), r["alert"]
        assert r["labels"]["severity"] in ("critical", "warning"), r
    names = {r["alert"] for r in rules()}
    assert SIDECAR_DOWN in names and set(CANARY_FAILURES) <= names and "VllmCanaryStale" in names
    assert {i.split("/")[1] for i in ids if i.startswith("VllmPodHeldOut/")} == set(REASONS)


def test_docs_list_every_alert_under_its_severity() -> None:
    """docs/alerting.md's table says which alert goes to which receiver: it must say what the rules say."""
    text = (REPO / "docs" / "alerting.md").read_text()
    rows = {m[0]: set(m[1].split("`, `")) for m in re.findall(r"^\| `(critical|warning)` \| `(.+)` \|$", text, re.M)}
    assert rows == {
        sev: {r["alert"] for r in rules() if r["labels"]["severity"] == sev} for sev in ("critical", "warning")
    }, rows


@pytest.mark.parametrize("name", CONFIGS)
def test_amtool_accepts_the_configuration(name: str, tmp_path: Path) -> None:
    res = amtool("check-config", str(written(name, tmp_path)))
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    count = len(CONFIGS[name][0]()["inhibit_rules"])
    assert count == 9 and f"{count} inhibit rules" in res.stdout and "0 templates" in res.stdout, res.stdout


def test_amtool_refuses_a_broken_configuration(tmp_path: Path) -> None:
    """The check is a real one: a route naming a receiver that does not exist is refused."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    config["route"]["routes"][0]["receiver"] = "nobody"
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(config))
    res = amtool("check-config", str(path))
    assert res.returncode != 0 and "nobody" in res.stdout + res.stderr, res.stdout + res.stderr


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("rid", [rule_id(r) for r in rules()])
def test_each_alert_reaches_the_receiver_of_its_severity(name: str, rid: str, tmp_path: Path) -> None:
    _, prefix, extra = CONFIGS[name]
    config = written(name, tmp_path)
    own = static_labels(rid)
    rule, severity = own["alertname"], own["severity"]
    labels = {**own, "job": "vllm-rocm-health", "instance": "10.1.2.3:9400", **extra}
    if rule == "VllmDeploymentNoReadyPod":  # aggregated by (namespace, job, release): no instance
        labels = {**own, "job": "vllm-rocm-health", "release": "llama", **extra}
    if rule == "VllmHealthSidecarAbsent":  # absent(up{...}) has no target: no job, no instance, no namespace
        labels = {"alertname": rule, "severity": severity}
        if name == "chart":
            # The documented limit of a namespaced AlertmanagerConfig: not routed by it...
            assert routed(config, labels) == "null"
            # ... unless Prometheus's enforcedNamespaceLabel gives the rule's alerts the rule's namespace.
            labels["namespace"] = NAMESPACE
    assert routed(config, labels) == f"{prefix}vllm-rocm-{severity}"


@pytest.mark.parametrize("name", CONFIGS)
def test_other_alerts(name: str, tmp_path: Path) -> None:
    """An alert of this project without a known severity still reaches someone; the chart's AlertmanagerConfig
    takes nothing from another namespace, nor another project's alerts."""
    _, prefix, extra = CONFIGS[name]
    config = written(name, tmp_path)
    new = {"alertname": "VllmSomethingNew", "severity": "info", **extra}
    assert routed(config, new) == f"{prefix}vllm-rocm-warning"
    if name == "chart":
        assert routed(config, {"alertname": SIDECAR_DOWN, "severity": "critical", "namespace": "other"}) == "null"
        assert routed(config, {"alertname": "KubePodCrashLooping", "severity": "critical", **extra}) == "null"


def _inhibitions(config: dict[str, Any]) -> set[tuple[frozenset[str], frozenset[str], tuple[str, ...]]]:
    """The inhibit rules as comparable sets of matchers (the namespace matcher the operator adds dropped)."""
    ns = f'namespace="{NAMESPACE}"'
    return {
        (
            frozenset(m for m in r["source_matchers"] if m != ns),
            frozenset(m for m in r["target_matchers"] if m != ns),
            tuple(r["equal"]),
        )
        for r in config["inhibit_rules"]
    }


def test_both_configurations_inhibit_alike() -> None:
    assert _inhibitions(CONFIGS["docker"][0]()) == _inhibitions(chart_config())


def test_held_out_inhibitions_pair_a_reason_with_alerts_at_least_as_loud() -> None:
    """A VllmPodHeldOut of a reason is muted only by alerts that report that same cause on the same pod, never by a
    quieter one (a critical hold muted by a warning would page nobody), and only for a reason the sidecar has."""
    loud = {"warning": 0, "critical": 1}
    severity = {r["alert"]: r["labels"]["severity"] for r in rules() if r["alert"] != "VllmPodHeldOut"}
    muted = []
    for source, target, equal in _inhibitions(CONFIGS["docker"][0]()):
        if 'alertname="VllmPodHeldOut"' not in target:
            continue
        [reason] = [m.split('"')[1] for m in target if m.startswith("reason=")]
        [names] = [m.split('"')[1] for m in source if m.startswith("alertname")]
        assert reason in REASONS and equal == ("instance",), (source, target)
        for name in names.split("|"):
            assert loud[severity[name]] >= loud[REASONS[reason].severity], (name, reason)
        muted.append(reason)
    assert len(muted) == len(set(muted)) >= 6, muted


# -- inhibition, on the real Alertmanager ----------------------------------------------------------------------
def _alert(name: str, instance: str, extra: dict[str, str], ends: datetime | None = None) -> dict[str, Any]:
    """`name` is a rule id: VllmPodHeldOut/<reason> for a held-out pod."""
    own = static_labels(name)
    now = datetime.now(timezone.utc)
    return {
        "labels": {**own, "job": "vllm-rocm-health", "instance": instance, **extra},
        "annotations": {
            "summary": f"{name} on {instance}",
            "runbook_url": f"runbook.md#{own.get('reason', own['alertname']).lower()}",
        },
        "startsAt": (now - timedelta(seconds=1)).isoformat(),
        "endsAt": (ends or now + timedelta(hours=1)).isoformat(),
        "generatorURL": "http://prometheus.test/graph",
    }


def _key(labels: dict[str, str]) -> tuple[str, str]:
    reason = f"/{labels['reason']}" if "reason" in labels else ""
    return labels["alertname"] + reason, labels["instance"]


def _wait(predicate, timeout: float, what: str) -> float:
    """Poll until `predicate()`; return the seconds it took (a measured latency for the next waits)."""
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.2)
    return time.monotonic() - t0


@pytest.mark.parametrize("name", CONFIGS)
def test_inhibition_on_the_real_alertmanager(name: str, tmp_path: Path) -> None:
    binary("prometheus-alertmanager")
    make, prefix, extra = CONFIGS[name]
    receiver = WebhookReceiver(free_port(), tmp_path / "notifications.jsonl", say=lambda _line: None)
    receiver.start()
    am = AlertmanagerServer(tmp_path / "am", free_port(), local_config(make(), receiver.url, timing="1s"))
    try:
        am.start(timeout=120)
        # Sidecar of a is down; b only has a stale canary; c's canary fails (wrong answers), so it is stale too;
        # d's canary fails and d is held out for it (canary_failing); e is held out by a mode mismatch and flaps;
        # f is held out by a canary that only errors (no failure alert says so). The sources go first: an alert's
        # first notification may leave as soon as it arrives, and Alertmanager mutes only by the alerts it holds.
        symptoms_a = [
            "VllmCanaryStale",
            "VllmCanaryFingerprintDrift",
            "VllmHealthSidecarWorkerDown",
            "VllmCudagraphCaptureFailed",
            "VllmKnownIssueActive",
            "VllmPodHeldOut/mode_mismatch",
        ]
        drift, held_e = "VllmCanaryFingerprintDrift", "VllmPodHeldOut/mode_mismatch"
        sources = [
            _alert(SIDECAR_DOWN, "a:9400", extra),
            _alert(drift, "c:9400", extra),
            _alert(drift, "d:9400", extra),
            _alert(held_e, "e:9400", extra),
        ]
        sent = [
            *sources,
            *(_alert(n, "a:9400", extra) for n in symptoms_a),
            _alert("VllmCanaryStale", "b:9400", extra),
            _alert("VllmCanaryStale", "c:9400", extra),
            _alert("VllmPodHeldOut/canary_failing", "d:9400", extra),
            _alert("VllmPodFlapping", "e:9400", extra),
            _alert("VllmPodHeldOut/canary_failing", "f:9400", extra),
            _alert("VllmHealthSidecarAbsent", "(none)", extra),
            _alert("VllmDeploymentNoReadyPod", "(none)", extra),
        ]
        # muted alert -> the alert that mutes it
        inhibited = {
            ("VllmCanaryStale", "c:9400"): (drift, "c:9400"),
            ("VllmPodHeldOut/canary_failing", "d:9400"): (drift, "d:9400"),
            ("VllmPodFlapping", "e:9400"): (held_e, "e:9400"),
            **{(n, "a:9400"): (SIDECAR_DOWN, "a:9400") for n in symptoms_a},
        }

        # The receiver: one firing notification per alert that is not inhibited, to the receiver of its severity,
        # with the labels and annotations Prometheus gave; none for an inhibited one.
        def firing() -> dict[tuple[str, str], dict[str, Any]]:
            out = {}
            for payload in notifications(receiver.out_path):
                for a in payload["alerts"]:
                    if a["status"] == "firing":
                        out[_key(a["labels"])] = {**a, "receiver": payload["receiver"]}
            return out

        am.post_alerts(sources)
        _wait(lambda: len(am.alerts()) == len(sources), 60, "Alertmanager to take the inhibiting alerts")
        # ...and notified, before any symptom arrives: the dispatcher has taken them and a group_wait has passed.
        # Alertmanager's inhibitor takes each alert on a goroutine of its own; on a starved machine it was still
        # behind when the symptoms' first notifications left (a fresh-clone run with a CPU hog, 2026-12-05).
        source_keys = {_key(a["labels"]) for a in sources}
        _wait(
            lambda: source_keys <= set(firing()), 120, f"notifications for the inhibiting alerts {sorted(source_keys)}"
        )
        am.post_alerts(sent[len(sources) :])

        def states() -> dict[tuple[str, str], dict[str, Any]]:
            return {_key(a["labels"]): a for a in am.alerts()}

        _wait(
            lambda: (
                len(states()) == len(sent) and all(a["status"]["state"] != "unprocessed" for a in states().values())
            ),
            60,
            "Alertmanager to take the alerts",
        )
        held = states()
        fingerprint = {k: a["fingerprint"] for k, a in held.items()}
        for key, alert in held.items():
            if key in inhibited:
                assert alert["status"]["state"] == "suppressed", (key, alert["status"])
                assert alert["status"]["inhibitedBy"] == [fingerprint[inhibited[key]]], (key, alert["status"])
            else:
                assert alert["status"]["state"] == "active" and not alert["status"]["inhibitedBy"], (key, alert)

        expected = set(held) - set(inhibited)
        took = _wait(lambda: expected <= set(firing()), 120, f"notifications for {sorted(expected)}")
        # Inhibited groups were due at the same time as these: twice the measured latency more proves nothing came.
        time.sleep(took + 2)
        got = firing()
        assert set(got) == expected, f"inhibited alerts were notified: {sorted(set(got) & set(inhibited))}"
        for key, alert in got.items():
            sev = alert["labels"]["severity"]
            assert alert["receiver"] == f"{prefix}vllm-rocm-{sev}", (key, alert["receiver"])
            assert alert["annotations"]["runbook_url"].endswith(key[0].split("/")[-1].lower())
            assert all(alert["labels"][k] == v for k, v in extra.items())

        # The sidecar of a is back (Prometheus sends the alert with endsAt now): a's symptoms are no longer muted by
        # it, and its resolution is notified. a's VllmCanaryStale stays muted: a's canary still fails (drift).
        am.post_alerts([_alert(SIDECAR_DOWN, "a:9400", extra, ends=datetime.now(timezone.utc))])
        want = {(n, "a:9400") for n in symptoms_a if n != "VllmCanaryStale"}
        _wait(lambda: want <= set(firing()), 120, f"the symptoms of a:9400 once its sidecar is back: {sorted(want)}")
        _wait(
            lambda: any(
                a["status"] == "resolved" and _key(a["labels"]) == (SIDECAR_DOWN, "a:9400")
                for p in notifications(receiver.out_path)
                for a in p["alerts"]
            ),
            120,
            "the resolved notification of VllmHealthSidecarDown",
        )
        held = states()
        assert held[("VllmCanaryStale", "a:9400")]["status"]["inhibitedBy"] == [
            fingerprint[("VllmCanaryFingerprintDrift", "a:9400")]
        ]
        assert {("VllmCanaryStale", "a:9400"), ("VllmCanaryStale", "c:9400")}.isdisjoint(firing())
    finally:
        am.stop()
        receiver.stop()
