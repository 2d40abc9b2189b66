"""What the chart tells the sidecar, held to the sidecar's own parser (vllm_rocm_health.cli.build_parser).

- sidecar.extraArgs / sidecar.extraEnv cannot set any flag of `vllm-rocm-health serve` but the few that cannot change
  readiness (templates/_sidecar.tpl "vllm-rocm.sidecarHarmless"), in any spelling (`--flag`, `--flag=value`,
  `--no-flag`, the `VLLM_HEALTH_*` twin), nor the variables the sidecar reads besides its flags. The flags are read
  from the parser, so a flag the sidecar gains is refused here until it is reviewed.
- The rendered arguments are ones the sidecar's parser takes, with the values the chart judged.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_health import config as sidecar_config
from vllm_rocm_health.cli import build_parser

from tests.support.helm_chart import (
    DEFAULT_MODEL,
    REPORT,
    arg_value,
    baseline_for,
    container,
    kinds,
    pod_spec,
    refusals,
    render,
)

HARMLESS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "charts/vllm-rocm/templates/_sidecar.tpl")
    .read_text()
    .split('{{- define "vllm-rocm.sidecarHarmless" -}}', 1)[1]
    .split("{{- end -}}", 1)[0]
)
# Variables the sidecar (or a library it uses) reads besides VLLM_HEALTH_*: whom it asks and what it runs.
PROCESS_ENV = [
    "POD_NAME",
    "POD_NAMESPACE",
    "POD_UID",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "SSL_CERT_FILE",
    "PYTHONPATH",
    "LD_PRELOAD",
    "VLLM_HEALTH_ROCM_VERSION",
    "VLLM_HEALTH_GPU_ARCH",
    "PATH",
]


def serve_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No VLLM_HEALTH_* from the test's own environment in the parser's defaults."""
    for name in [n for n in os.environ if n.startswith(sidecar_config.ENV_PREFIX)]:
        monkeypatch.delenv(name)
    return monkeypatch


def serve_actions() -> list[argparse.Action]:
    return [a for a in serve_parser()._actions if a.option_strings]


def has_flag(flag: str) -> bool:
    return any(flag in a.option_strings for a in serve_actions())


AUTHORITY_FLAGS = ("--expected-mode", "--qualification", "--allow-known-issues", "--no-canary-enabled")


def test_the_sidecar_has_the_flags_the_chart_renders() -> None:
    assert all(has_flag(f) for f in AUTHORITY_FLAGS)


# --- sidecar.extraArgs / sidecar.extraEnv -----------------------------------------------------------------------------


def test_the_harmless_list_names_real_flags_and_nothing_the_chart_sets() -> None:
    flags = {o for a in serve_actions() for o in a.option_strings}
    assert set(HARMLESS["flags"]) <= flags, "a harmless flag the sidecar no longer has"
    dests = {a.dest for a in serve_actions()}
    assert {e.removeprefix("VLLM_HEALTH_").lower() for e in HARMLESS["env"]} <= dests
    chart_set = {a for a in container(pod_spec(render()), "health")["args"] if a.startswith("-")}
    assert not chart_set & set(HARMLESS["flags"])


def test_every_other_sidecar_flag_is_refused_in_every_spelling() -> None:
    """Every option string of `vllm-rocm-health serve` (from its parser: aliases and --no- forms included), alone and
    with `=value`, is refused in sidecar.extraArgs unless it is on the harmless list; those render."""
    items, harmless = [], []
    for action in serve_actions():
        for option in action.option_strings:
            (harmless if option in HARMLESS["flags"] else items).extend([option, f"{option}=1"])
    assert len(items) >= 2 * 25 and "--canary-baseline" in items and "--no-log-from-start" in items
    lines = refusals({"sidecar.extraArgs": items})
    refused = {int(line.split("]", 1)[0].split("[", 1)[1]) for line in lines if line.startswith("sidecar.extraArgs[")}
    missed = [item for i, item in enumerate(items) if i not in refused]
    assert not missed, f"the sidecar takes these, and the chart renders them: {missed}"
    # A flag the sidecar does not have yet, abbreviations (whatever allow_abbrev says), a lone dash-word.
    assert len(refusals({"sidecar.extraArgs": ["--canary-anything-new", "--canary-base", "--no-canary", "-x"]})) == 4
    docs = render({"sidecar.extraArgs": ["--log-level", "DEBUG", "--log-format=json", "--no-events"]})
    assert container(pod_spec(docs), "health")["args"][-4:] == [
        "--log-level",
        "DEBUG",
        "--log-format=json",
        "--no-events",
    ]


def test_a_refusal_names_the_typed_value() -> None:
    lines = refusals(
        {"sidecar.extraArgs": ["--canary-score-tolerance", "1", "--baseline=/tmp/b.json", "--no-canary-enabled"]}
    )
    assert "(set sidecar.canaryScoreTolerance instead)" in lines[0]
    assert "(set canary.baseline or canary.existingConfigMap instead)" in lines[1]
    assert "(set canary.enabled instead)" in lines[2]


def test_every_env_twin_and_process_variable_is_refused() -> None:
    names = sorted({sidecar_config.ENV_PREFIX + a.dest.upper() for a in serve_actions()} | set(PROCESS_ENV))
    names = [n for n in names if n not in HARMLESS["env"]]
    assert "VLLM_HEALTH_CANARY_BASELINE" in names and "VLLM_HEALTH_CANARY_SCORE_TOLERANCE" in names
    lines = refusals({"sidecar.extraEnv": [{"name": n, "value": "1"} for n in names]})
    refused = {int(line.split("]", 1)[0].split("[", 1)[1]) for line in lines if line.startswith("sidecar.extraEnv[")}
    missed = [n for i, n in enumerate(names) if i not in refused]
    assert not missed, missed
    secret = [{"name": "VLLM_HEALTH_CANARY_ENABLED", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    assert refusals({"sidecar.extraEnv": secret})
    docs = render({"sidecar.extraEnv": [{"name": n, "value": "x"} for n in HARMLESS["env"]]})
    env = {e["name"] for e in container(pod_spec(docs), "health")["env"]}
    assert set(HARMLESS["env"]) <= env


def test_the_env_twins_are_what_the_sidecar_reads(clean_env: pytest.MonkeyPatch) -> None:
    """The `VLLM_HEALTH_*` names refused above are the ones the sidecar's parser takes its defaults from."""
    for action in serve_actions():
        if action.dest == "help":
            continue
        var = sidecar_config.ENV_PREFIX + action.dest.upper()
        probe = "false" if isinstance(action, argparse.BooleanOptionalAction) else "7"
        clean_env.setenv(var, probe)
        default = next(a for a in serve_parser()._actions if a.dest == action.dest).default
        clean_env.delenv(var)
        assert str(default).lower() in (probe, "7.0"), (var, default)


# --- the rendered arguments, parsed by the sidecar --------------------------------------------------------------------


def parse_rendered(docs: list[dict[str, Any]], tmp_path: Path) -> argparse.Namespace:
    """The rendered sidecar arguments through the sidecar's parser and config check, with the mounted files
    (baseline, report) written where they would be and nothing in the environment."""
    args = list(container(pod_spec(docs), "health")["args"])
    assert args[0] == "serve"
    for cm in kinds(docs).get("ConfigMap", []):
        for key, text in cm.get("data", {}).items():
            mounted = f"/etc/vllm-rocm-health/{key}"
            if mounted in args:
                (tmp_path / key).write_text(text)
                args[args.index(mounted)] = str(tmp_path / key)
    ns = build_parser().parse_args(args)
    sidecar_config.from_args(ns)  # the checks the sidecar runs at start (ranges, modes, files)
    return ns


def test_the_sidecar_takes_the_rendered_arguments_with_a_baseline(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    values = {
        "allowKnownIssues": ["aiter-fa-full-cudagraph-always", "aiter-mxfp4-moe-graph-unsafe"],
        "compilation.cudagraphMode": "PIECEWISE",
        "canary.baseline": baseline_for(DEFAULT_MODEL),
    }
    ns = parse_rendered(render(values), tmp_path)
    assert ns.expected_mode == "PIECEWISE"
    assert ns.allow_known_issues == "aiter-fa-full-cudagraph-always,aiter-mxfp4-moe-graph-unsafe"
    assert ns.canary_enabled is True and ns.canary_baseline == str(tmp_path / "baseline.json")
    assert (ns.canary_seed, ns.canary_num_problems, ns.canary_long_prompts) == (20251202, 8, 2)
    assert (ns.log_source, ns.k8s_container, ns.vllm_url) == ("k8s", "vllm", "http://127.0.0.1:8000")


def test_the_sidecar_takes_the_rendered_arguments_with_a_report(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    values = {
        "vllm.release": "0.26.0",
        "model.name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "model.servedName": "smollm2-135m-instruct",
        "qualification": REPORT.read_text(),
        "sidecar.canaryLongPrompts": 0,
    }  # the H200 report's baseline (format 1) holds no long-prompt answers
    ns = parse_rendered(render(values), tmp_path)
    assert ns.qualification == str(tmp_path / "qualification.json") and ns.canary_baseline is None
    assert ns.expected_mode == "FULL_DECODE_ONLY" and ns.model == "smollm2-135m-instruct"
    assert ns.canary_long_prompts == 0


def test_the_sidecar_takes_the_rendered_arguments_with_the_canary_off(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    ns = parse_rendered(render({"canary.enabled": False}), tmp_path)
    assert ns.canary_enabled is False and ns.canary_baseline is None


def test_allow_known_issues_is_one_value_for_guard_and_sidecar() -> None:
    values = {
        "vllm.release": "0.10.2",
        "vllm.patched": False,
        "compilation.cudagraphMode": "FULL",
        "allowKnownIssues": ["aiter-fa-full-cudagraph-always"],
    }
    args = container(pod_spec(render(values)), "health")["args"]
    assert arg_value(args, "--allow-known-issues") == "aiter-fa-full-cudagraph-always"
    assert "--allow-known-issues" not in container(pod_spec(render()), "health")["args"]


def test_the_expected_mode_is_the_config_stage_mode() -> None:
    docs = render(
        {
            "vllm.release": "0.20.0",
            "compilation.cudagraphMode": "PIECEWISE",
            "compilation.compilationConfig": {"splitting_ops": []},
        }
    )
    meta = kinds(docs)["Deployment"][0]["spec"]["template"]["metadata"]
    eff = json.loads(meta["annotations"]["vllm-rocm/effective-settings"])
    assert (eff["requestedMode"], eff["configMode"]) == ("PIECEWISE", "NONE")
    assert arg_value(container(pod_spec(docs), "health")["args"], "--expected-mode") == "NONE"
