"""The accuracy gate: with default values the chart refuses to render, naming the ways to give the canary a reference
(canary.baseline, canary.existingConfigMap, qualification) and the explicit, loud way out (canary.enabled=false).
Rendered with the real helm; the baselines are checked with the sidecar's own reader."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_health.canary.baseline import Baseline

from tests.support.helm_chart import (
    CAPS,
    CHART,
    DEFAULT_MODEL,
    HELM,
    REPORT,
    arg_value,
    baseline_for,
    container,
    helm,
    kinds,
    notes,
    pod_spec,
    render,
    render_error,
)

REFERENCE_ARGS = ("--canary-baseline", "--qualification", "--no-canary-enabled", "--canary-enabled")


def reference_args(args: list[str]) -> list[str]:
    return [a for a in args if a in REFERENCE_ARGS]


def test_default_values_are_refused_with_every_way_out() -> None:
    err = render_error({}, reference=False)
    assert "no accuracy reference for the canary" in err
    for way in (
        "canary.baseline",
        "--set-file canary.baseline=baseline.json",
        "vllm-rocm-health baseline record",
        f"--model {DEFAULT_MODEL}",
        "canary.existingConfigMap",
        "qualification",
        "--set-file qualification=report.json",
        "canary.enabled=false",
        "vllm_canary_configured 0",
        "VllmCanaryNotConfigured",
    ):
        assert way in err, way
    # Also through `helm install` (what a new user runs) and for every workload kind.
    proc = subprocess.run(
        [HELM, "install", "rel", str(CHART), "-n", "llm", "--dry-run=client"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "no accuracy reference for the canary" in proc.stderr
    assert "no accuracy reference" in render_error(
        {"multiNode.enabled": True, "tensorParallelSize": 8}, reference=False
    )


def test_the_gate_comes_after_the_guard() -> None:
    """A configuration the guard refuses is refused for that, with or without a reference: the gate is the last
    check, so its message never hides the guard's."""
    err = render_error({"extraArgs": ["--enforce-eager"]}, reference=False)
    assert "the chart refuses these values" in err and "no accuracy reference" not in err


def test_a_baseline_reaches_the_sidecar(tmp_path: Path) -> None:
    text = baseline_for(DEFAULT_MODEL)
    path = tmp_path / "baseline.json"
    path.write_text(text)
    # --set-file, as documented.
    proc = helm("template", "rel", str(CHART), "-n", "llm", *CAPS, "--set-file", f"canary.baseline={path}", check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    cm = next(d for d in kinds(docs)["ConfigMap"] if d["metadata"]["name"].endswith("-canary"))
    assert cm["data"]["baseline.json"] == text  # byte for byte
    (tmp_path / "mounted.json").write_text(cm["data"]["baseline.json"])
    Baseline.load(tmp_path / "mounted.json").check_matches(DEFAULT_MODEL, 20251202, 8, 2)  # the sidecar's reader
    side = container(pod_spec(docs), "health")
    assert reference_args(side["args"]) == ["--canary-baseline"]
    assert arg_value(side["args"], "--canary-baseline") == "/etc/vllm-rocm-health/baseline.json"


@pytest.mark.parametrize(
    "values,message",
    [
        ({"canary.baseline": "not json"}, "canary.baseline: not JSON"),
        ({"canary.baseline": "[1, 2]"}, "canary.baseline: not JSON"),
        ({"canary.baseline": '{"version": 1}'}, "canary.baseline: format null, this sidecar reads 2"),
        (
            {"canary.baseline": baseline_for("another/model")},
            'model "meta-llama/Llama-3.1-8B-Instruct" != baseline\'s "another/model"',
        ),
        (
            {"canary.baseline": baseline_for(DEFAULT_MODEL), "sidecar.canarySeed": 1},
            "seed 1 (sidecar.canarySeed) != baseline's 20251202",
        ),
        (
            {"canary.baseline": baseline_for(DEFAULT_MODEL), "sidecar.canaryNumProblems": 12},
            "num_problems 12 (sidecar.canaryNumProblems) != baseline's 8",
        ),
        (
            {"canary.baseline": json.dumps({**json.loads(baseline_for(DEFAULT_MODEL)), "answers": [1]})},
            "1 answers for 8 problems",
        ),
        # The long prompts (the prefill rows of the mixed batch) are checked against the baseline's answers: a baseline
        # without them (every format-1 file) cannot serve a canary that sends them.
        (
            {"canary.baseline": baseline_for(DEFAULT_MODEL, long_prompts=0)},
            "2 long prompts per run (sidecar.canaryLongPrompts, within sidecar.canaryMaxRequests) != baseline's 0 "
            "(the baseline holds no long-prompt answers",
        ),
        ({"canary.baseline": baseline_for(DEFAULT_MODEL), "sidecar.canaryLongPrompts": 3}, "3 long prompts per run"),
        # canaryMaxRequests 12 leaves 12 - 3 fingerprint texts - 8 problems = 1 long prompt.
        ({"canary.baseline": baseline_for(DEFAULT_MODEL), "sidecar.canaryMaxRequests": 12}, "1 long prompts per run"),
    ],
)
def test_a_baseline_the_sidecar_would_refuse_is_refused(values: dict[str, Any], message: str) -> None:
    err = render_error(values)
    assert message in err, err


def test_a_baseline_for_another_served_name_follows_model_served_name() -> None:
    served = "llama-8b"
    docs = render({"model.servedName": served, "canary.baseline": baseline_for(served)})
    assert arg_value(container(pod_spec(docs), "health")["args"], "--model") == served


def test_canary_disabled_renders_loudly() -> None:
    docs = render({"canary.enabled": False})
    spec = pod_spec(docs)
    side = container(spec, "health")
    assert reference_args(side["args"]) == ["--no-canary-enabled"]
    assert not [v for v in spec["volumes"] if v["name"] == "canary-reference"]
    assert not [m for m in side["volumeMounts"] if m["name"] == "canary-reference"]
    assert not [
        d for d in kinds(docs).get("ConfigMap", []) if d["metadata"]["name"].endswith(("-canary", "-qualification"))
    ]
    text = notes({"canary.enabled": False})
    assert "WARNING: THE ACCURACY CANARY IS SWITCHED OFF (canary.enabled=false)." in text
    assert "WRONG TOKENS WILL NOT BE CAUGHT." in text
    assert "vllm_canary_configured 0" in text and "VllmCanaryNotConfigured" in text
    assert "vllm-rocm-health baseline record" in text and "--set-file canary.baseline=baseline.json" in text
    # `helm test` fails loudly too instead of reporting a canary that never runs.
    test_pod = next(d for d in docs if d["kind"] == "Pod")
    script = test_pod["spec"]["containers"][0]["args"][0]
    assert 'values.get("vllm_canary_configured") == 0.0' in script and "canary is switched off" in script


def test_a_gated_release_says_what_readiness_waits_for() -> None:
    text = notes({})
    assert "WRONG TOKENS" not in text
    assert "canary passed on the current engine instance (reference: baseline)" in text
    text = notes({"canary.existingConfigMap": "mine"})
    assert "(reference: existingConfigMap mine)" in text


@pytest.mark.parametrize(
    "reference",
    [
        {"canary.baseline": baseline_for(DEFAULT_MODEL)},
        {"canary.existingConfigMap": "mine"},
        {
            "qualification": REPORT.read_text(),
            "vllm.release": "0.26.0",
            "model.servedName": "smollm2-135m-instruct",
            "sidecar.canaryLongPrompts": 0,
        },
    ],
)
def test_canary_disabled_with_a_reference_is_a_contradiction(reference: dict[str, Any]) -> None:
    err = render_error({"canary.enabled": False, **reference})
    key = next(iter(reference))
    assert f"canary.enabled=false together with {key}" in err and "contradiction" in err


def test_two_references_are_refused() -> None:
    err = render_error({"canary.baseline": baseline_for(DEFAULT_MODEL), "canary.existingConfigMap": "mine"})
    assert "give the canary's accuracy reference once: canary.baseline and canary.existingConfigMap" in err


def test_canary_enabled_is_a_typed_boolean() -> None:
    assert "/canary/enabled" in render_error({"canary.enabled": "no"})


def test_the_multinode_leader_gets_the_same_reference() -> None:
    docs = render({"multiNode.enabled": True, "tensorParallelSize": 8, "canary.enabled": False})
    lws = kinds(docs)["LeaderWorkerSet"][0]["spec"]["leaderWorkerTemplate"]
    side = container(lws["leaderTemplate"]["spec"], "health")
    assert reference_args(side["args"]) == ["--no-canary-enabled"]
    docs = render({"multiNode.enabled": True, "tensorParallelSize": 8})
    lws = kinds(docs)["LeaderWorkerSet"][0]["spec"]["leaderWorkerTemplate"]
    assert reference_args(container(lws["leaderTemplate"]["spec"], "health")["args"]) == ["--canary-baseline"]


def test_the_readme_argues_the_choice() -> None:
    readme = (CHART / "README.md").read_text()
    section = readme.split("## Accuracy gate", 1)[1].split("\n## ", 1)[0]
    for point in (
        "canary.enabled=false",
        "VllmCanaryNotConfigured",
        "vllm_canary_configured",
        "vllm-rocm-health baseline record",
        "qualification",
    ):
        assert point in section, point
