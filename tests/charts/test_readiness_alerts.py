"""The alerts on pods held out of the Service, for every readiness reason the sidecar exports
(vllm_rocm_health.readiness.REASONS, which also holds each reason's severity and hold): each reason has its
VllmPodHeldOut rule with that severity and hold, and its runbook section; and the real promtool shows, for each
reason, the alert firing once the pod has not been Ready for the hold and not before, counting from the last Ready
scrape when the reason changed on the way, for a new pod from its first scrape, never for a shorter hold, and
resolving once the pod is Ready again (after the rules' keep_firing_for). A reason added to REASONS without
`make generate` or without a runbook section fails here; so does a rule or section for a reason that is gone."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_health.readiness import CRITICAL, REASONS, WARNING, HeldOut
from vllm_rocm_stack import readiness_alerts

from tests.support.markdown import anchors, section

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / readiness_alerts.RULES
RUNBOOK = REPO / readiness_alerts.RUNBOOK
JOB = "vllm-rocm-health"
KEEP = 5  # minutes: readiness_alerts.KEEP_FIRING
CONFIRM = 1  # minutes: readiness_alerts.CONFIRM


def minutes(duration: str) -> int:
    m = re.fullmatch(r"(\d+)([mh])", duration)
    assert m, f"a hold this test does not read: {duration!r} (write it in whole minutes or hours)"
    return int(m.group(1)) * (60 if m.group(2) == "h" else 1)


def held_out_rules(rules_text: str) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(rules_text)["groups"] for r in g["rules"] if r.get("alert") == "VllmPodHeldOut"]


def problems(reasons: Mapping[str, HeldOut], rules_text: str, runbook_text: str) -> list[str]:
    """What keeps the reasons from being covered: a reason without its rule (or with another severity or hold), a rule
    for a reason that does not exist, a reason without a runbook section saying what it means, what to check and how
    to fix it."""
    out = []
    rules = held_out_rules(rules_text)
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for r in rules:
        by_reason.setdefault(r["labels"].get("reason", ""), []).append(r)
    for reason, alert in reasons.items():
        found = by_reason.pop(reason, [])
        if len(found) != 1:
            out.append(f"{reason}: {len(found)} VllmPodHeldOut rules (run `make generate`)")
            continue
        rule = found[0]
        if rule["labels"]["severity"] != alert.severity:
            out.append(f"{reason}: severity {rule['labels']['severity']}, REASONS says {alert.severity}")
        if f'reason="{reason}"' not in rule["expr"] or f"[{alert.hold}]" not in rule["expr"]:
            out.append(f"{reason}: the rule does not select this reason with hold {alert.hold}: {rule['expr']}")
        if rule["annotations"]["runbook_url"] != f"{readiness_alerts.RUNBOOK_URL}#{reason}":
            out.append(f"{reason}: runbook_url {rule['annotations']['runbook_url']}")
        body = section(runbook_text, reason)
        if reason not in anchors(runbook_text) or not all(f"**{k}**" in body for k in ("Meaning", "Check", "Fix")):
            out.append(f'{reason}: no runbook section "### `{reason}`" with Meaning, Check and Fix')
    out += [f"{reason}: a VllmPodHeldOut rule for a reason REASONS does not have" for reason in by_reason]
    return out


def test_every_reason_has_its_alert_and_runbook_section() -> None:
    assert REASONS and all(a.severity in (CRITICAL, WARNING) for a in REASONS.values())
    assert problems(REASONS, RULES.read_text(), RUNBOOK.read_text()) == []
    assert len(held_out_rules(RULES.read_text())) == len(REASONS)


def test_a_new_reason_needs_make_generate_and_a_runbook_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe: a line in REASONS, `make generate` (the rule), a runbook section. Each missing step is found."""
    new = {**REASONS, "weights_unverified": HeldOut(CRITICAL, "5m")}
    rules, runbook = RULES.read_text(), RUNBOOK.read_text()
    assert problems(new, rules, runbook) == ["weights_unverified: 0 VllmPodHeldOut rules (run `make generate`)"]
    monkeypatch.setattr(readiness_alerts, "REASONS", new)
    regenerated = readiness_alerts.with_group(rules, readiness_alerts.group())
    assert problems(new, regenerated, runbook) == [
        'weights_unverified: no runbook section "### `weights_unverified`" with Meaning, Check and Fix'
    ]
    entry = "\n### `weights_unverified`\n\n- **Meaning**: m.\n- **Check**: c.\n- **Fix**: f.\n"
    assert problems(new, regenerated, runbook + entry) == []
    # A reason that is gone leaves a rule behind until `make generate`.
    gone = {k: v for k, v in REASONS.items() if k != "canary_stale"}
    assert problems(gone, rules, runbook) == ["canary_stale: a VllmPodHeldOut rule for a reason REASONS does not have"]
    # And a severity changed in REASONS but not regenerated.
    louder = {**REASONS, "capture_pending": HeldOut(CRITICAL, REASONS["capture_pending"].hold)}
    assert problems(louder, rules, runbook) == ["capture_pending: severity warning, REASONS says critical"]


def test_generated_block_refuses_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="not readiness reasons"):
        readiness_alerts.group({"no_such_reason": "5s"})
    with pytest.raises(ValueError, match="exactly one"):
        readiness_alerts.with_group("groups: []\n", readiness_alerts.group({}))
    monkeypatch.setattr(readiness_alerts, "REASONS", {**REASONS, "x": HeldOut("page", "5m")})
    with pytest.raises(ValueError, match=r"severity critical\|warning"):
        readiness_alerts.group()


@pytest.mark.parametrize(
    "spec", ["health_failing", "health_failing=", "nope=5s", "health_failing=5", "health_failing=0s"]
)
def test_parse_holds_refuses(spec: str) -> None:
    with pytest.raises(ValueError, match="REASON=DURATION"):
        readiness_alerts.parse_holds(spec)


def test_parse_holds() -> None:
    assert readiness_alerts.parse_holds("health_failing=10s, mode_mismatch=1m30s") == {
        "health_failing": "10s",
        "mode_mismatch": "1m30s",
    }
    assert readiness_alerts.parse_holds("") == {}


# -- promtool, every reason --------------------------------------------------------------------------------------
def _expected(instance: str, reason: str, rule: dict[str, Any]) -> dict[str, Any]:
    hold = REASONS[reason].hold
    return {
        "exp_labels": {"severity": REASONS[reason].severity, "reason": reason, "job": JOB, "instance": instance},
        "exp_annotations": {
            "summary": f"{instance} not Ready for more than {hold}, held out by {reason}",
            "description": rule["annotations"]["description"],
            "runbook_url": f"charts/vllm-rocm/docs/runbook.md#{reason}",
        },
    }


def _series(instance: str, ready: str, reasons: dict[str, str]) -> list[dict[str, str]]:
    out = [{"series": f'vllm_sidecar_ready{{job="{JOB}", instance="{instance}"}}', "values": ready}]
    out += [
        {"series": f'vllm_sidecar_not_ready_reason{{job="{JOB}", instance="{instance}", reason="{r}"}}', "values": v}
        for r, v in reasons.items()
    ]
    return out


def case(reason: str, rule: dict[str, Any]) -> dict[str, Any]:
    """The promtool test group of one reason (a sample a minute; `Nx{k}` is k+1 samples of N). Four pods:
    - held: Ready until 10m, then held out by the reason for h + 15 min: fires at the hold (+ the 1 min confirmation),
      not a minute before; Ready again: it keeps firing KEEP minutes (a blip does not resolve it), then resolves;
    - new: held out from its first scrape on: the hold counts from there;
    - short: held out a minute less than the hold, then Ready: never fires;
    - via: held out by another reason first, then by this one, never Ready in between: the hold counts from the last
      Ready scrape, and the severity is this reason's."""
    h = minutes(REASONS[reason].hold)
    other = "capture_pending" if reason != "capture_pending" else "canary_pending"
    back = 25 + h  # `held` is Ready again from here
    end = back + KEEP + 10  # the last sample

    def check(t: int, *instances: str) -> dict[str, Any]:
        return {
            "eval_time": f"{t}m",
            "alertname": "VllmPodHeldOut",
            "exp_alerts": [_expected(f"{i}:9400", reason, rule) for i in instances],
        }

    return {
        "interval": "1m",
        "input_series": [
            *_series("held:9400", f"1x9 0x{h + 14} 1x{end - back}", {reason: f"0x9 1x{h + 14} 0x{end - back}"}),
            *_series("new:9400", f"0x{end}", {reason: f"1x{end}"}),
            *_series("short:9400", f"1x9 0x{h - 2} 1x{end - 9 - h}", {reason: f"0x9 1x{h - 2} 0x{end - 9 - h}"}),
            *_series(
                "via:9400",
                f"1x9 0x{end - 10}",
                {other: f"0x9 1x{h - 3} 0x{end - 8 - h}", reason: f"0x{h + 7} 1x{end - 8 - h}"},
            ),
        ],
        "alert_rule_test": [
            check(h),
            check(h + CONFIRM, "new"),
            check(10 + h, "new"),
            check(10 + h + CONFIRM, "held", "new", "via"),
            check(back + KEEP - 1, "held", "new", "via"),
            check(back + KEEP, "new", "via"),
            check(end, "new", "via"),
        ],
    }


def test_promtool_each_reason_fires_after_its_hold_and_resolves_when_ready(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not on PATH: install the Debian package prometheus (`make setup` does)")
    assert readiness_alerts.KEEP_FIRING == f"{KEEP}m" and readiness_alerts.CONFIRM == f"{CONFIRM}m"
    rules = {r["labels"]["reason"]: r for r in held_out_rules(RULES.read_text())}
    tests = [case(reason, rules[reason]) for reason in REASONS]
    # The shipped group as it is, alone (the other groups only cost promtool time here).
    group = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == readiness_alerts.GROUP]
    only = tmp_path / "readiness.rules.yaml"
    only.write_text(yaml.safe_dump({"groups": group}, sort_keys=False))
    path = tmp_path / "held-out.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(only)], "evaluation_interval": "1m", "tests": tests}))
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout[-6000:] + res.stderr[-2000:]
    assert len(tests) == len(REASONS)


def test_promtool_would_catch_a_wrong_hold(tmp_path: Path) -> None:
    """The check is a real one: the same cases against rules whose capture_pending hold is 5 minutes short fail."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not on PATH")
    text = RULES.read_text()
    hold = REASONS["capture_pending"].hold
    shorter = f"{minutes(hold) - 5}m"
    wrong = readiness_alerts.with_group(text, readiness_alerts.group({"capture_pending": shorter}))
    bad = tmp_path / "rules.yaml"
    bad.write_text(wrong)
    rules = {r["labels"]["reason"]: r for r in held_out_rules(text)}
    path = tmp_path / "t.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(bad)],
                "evaluation_interval": "1m",
                "tests": [case("capture_pending", rules["capture_pending"])],
            }
        )
    )
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr, res.stdout
