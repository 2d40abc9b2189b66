"""`vllm-rocm qualification publish|current` without an API server: the one judgement both commands make
(`deployable`), and the CLI's refusals, each before any API call: bad arguments exit 2, a refused report exit 1,
no API configuration exit 3. The commands against a real kube-apiserver: tests/kube/test_qualification_publish.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_rocm_core.qualification import QualificationError, validate
from vllm_rocm_health.qualification_publish import Wanted, deployable

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"
MI300X = "AMD_Instinct_MI300X_OAM"
MODEL, RELEASE = "smollm2-135m-instruct", "0.26.0"  # what the H200 report measured; it recommends FULL_DECODE_ONLY


def tagged(tmp_path: Path, **change: object) -> Path:
    raw = {**json.loads(H200.read_text()), "gpu_product": MI300X, **change}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(raw))
    return path


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_qualify.command", "qualification", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def no_api_env(tmp_path: Path) -> dict[str, str]:
    """Outside a pod, with a kubeconfig that does not exist: any API call would exit 3."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return {**env, "KUBECONFIG": str(tmp_path / "no-kubeconfig")}


def wanted_args(**change: str) -> list[str]:
    values = {
        "--configmap": "llama-qualification",
        "--namespace": "llm",
        "--vllm-version": RELEASE,
        "--model": MODEL,
        "--gpu-product": MI300X,
        **change,
    }
    return [x for k, v in values.items() for x in (k, v)]


# --- the judgement -------------------------------------------------------------------------------------------
def test_deployable_gives_the_recommended_mode() -> None:
    report = validate({**json.loads(H200.read_text()), "gpu_product": MI300X})
    assert deployable(report, Wanted(RELEASE, MODEL, MI300X)) == "FULL_DECODE_ONLY"
    assert deployable(report, Wanted(RELEASE, MODEL, MI300X, ("NONE", "FULL_DECODE_ONLY"))) == "FULL_DECODE_ONLY"


@pytest.mark.parametrize(
    "change,want,words",
    [
        ({}, Wanted("0.26.1", MODEL, MI300X), "measured on vLLM 0.26.0, vLLM 0.26.1 runs"),
        ({}, Wanted(RELEASE, "other", MI300X), "this deployment serves 'other': qualify this model"),
        ({}, Wanted(RELEASE, "", MI300X), "no served model name"),
        ({}, Wanted(RELEASE, MODEL, "AMD_Instinct_MI355X_OAM"), "this deployment runs on AMD_Instinct_MI355X_OAM"),
        ({"gpu_product": None}, Wanted(RELEASE, MODEL, MI300X), "does not say which GPU product it measured"),
        ({}, Wanted(RELEASE, MODEL, MI300X, ("NONE", "PIECEWISE")), "does not allow (allowed: NONE, PIECEWISE)"),
        ({"recommended": None}, Wanted(RELEASE, MODEL, MI300X), "recommends no mode"),
        ({"baseline": None}, Wanted(RELEASE, MODEL, MI300X), "carries no canary baseline"),
        ({"baseline": {"answers": [], "fingerprints": []}}, Wanted(RELEASE, MODEL, MI300X), "baseline"),
    ],
)
def test_deployable_refuses_saying_why(change: dict, want: Wanted, words: str) -> None:
    raw = {**json.loads(H200.read_text()), "gpu_product": MI300X, **change}
    raw = {k: v for k, v in raw.items() if not (k == "gpu_product" and v is None)}
    with pytest.raises(QualificationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        deployable(validate(raw), want)


# --- the CLI, before any API call ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["publish", "current"])
@pytest.mark.parametrize(
    "change,words",
    [
        ({"--configmap": "Llama_Qualification"}, "not a ConfigMap name"),
        ({"--namespace": "LLM"}, "not a namespace name"),
        ({"--gpu-product": "AMD Instinct MI300X"}, "not a GPU product name"),
        ({"--model": ""}, "--model: empty"),
        ({"--vllm-version": " "}, "--vllm-version: empty"),
        ({"--modes": "FULL,TURBO"}, "--modes TURBO: not a cudagraph mode"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, command: str, change: dict, words: str) -> None:
    extra = ["--report", str(tagged(tmp_path))] if command == "publish" else []
    res = run(command, *extra, *wanted_args(**change), env=no_api_env(tmp_path))
    assert res.returncode == 2 and words in res.stderr, res.stderr


@pytest.mark.parametrize("label", ["team", "=x", "team=a b", "Bad Key=x", "app.kubernetes.io/managed-by=helm"])
def test_a_label_that_is_not_one_exits_2(tmp_path: Path, label: str) -> None:
    res = run("publish", "--report", str(tagged(tmp_path)), *wanted_args(), "--label", label, env=no_api_env(tmp_path))
    assert res.returncode == 2 and "--label" in res.stderr, res.stderr


def test_a_required_argument_missing_exits_2(tmp_path: Path) -> None:
    res = run("publish", "--report", str(tagged(tmp_path)), "--configmap", "q", env=no_api_env(tmp_path))
    assert res.returncode == 2 and "required" in res.stderr


def test_outside_a_pod_the_namespace_must_be_given(tmp_path: Path) -> None:
    if Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").exists():
        pytest.skip("this machine is a pod: its service account names a namespace")
    args = [a for a in wanted_args() if a not in ("--namespace", "llm")]
    res = run("current", *args, env=no_api_env(tmp_path))
    assert res.returncode == 2 and "give --namespace" in res.stderr, res.stderr


@pytest.mark.parametrize(
    "change,args,words",
    [
        ({}, {"--gpu-product": "AMD_Instinct_MI355X_OAM"}, "this deployment runs on AMD_Instinct_MI355X_OAM"),
        ({}, {"--vllm-version": "0.26.1"}, "measured on vLLM 0.26.0"),
        ({}, {"--modes": "NONE"}, "does not allow (allowed: NONE)"),
        ({"baseline": None}, {}, "carries no canary baseline"),
        ({"kind": "other"}, {}, "not a qualification report"),
    ],
)
def test_a_refused_report_exits_1_before_any_api_call(tmp_path: Path, change: dict, args: dict, words: str) -> None:
    """No API is configured here: reaching it would exit 3. The report is judged first."""
    res = run("publish", "--report", str(tagged(tmp_path, **change)), *wanted_args(**args), env=no_api_env(tmp_path))
    assert res.returncode == 1 and words in res.stderr and "nothing written" in res.stderr, res.stderr


def test_an_unreadable_report_exits_1(tmp_path: Path) -> None:
    res = run("publish", "--report", str(tmp_path / "none.json"), *wanted_args(), env=no_api_env(tmp_path))
    assert res.returncode == 1 and "none.json" in res.stderr, res.stderr


def test_without_api_configuration_it_exits_3_saying_where_it_looked(tmp_path: Path) -> None:
    """Outside a pod the kubeconfig is read (KUBECONFIG); in a pod (KUBERNETES_SERVICE_HOST) the service account
    only, never a kubeconfig instead."""
    report = str(tagged(tmp_path))
    for command in (["publish", "--report", report], ["current"]):
        res = run(*command, *wanted_args(), env=no_api_env(tmp_path))
        assert res.returncode == 3 and f"from the kubeconfig ({tmp_path / 'no-kubeconfig'})" in res.stderr, res.stderr
    in_pod = {**no_api_env(tmp_path), "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    if Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists():
        pytest.skip("this machine has a service account token")
    res = run("publish", "--report", report, *wanted_args(), env=in_pod)
    assert res.returncode == 3 and "the pod's service account (in-cluster configuration)" in res.stderr, res.stderr


@pytest.mark.parametrize("command", ["publish", "current"])
def test_help_explains_the_checks_the_exit_codes_and_an_example(command: str) -> None:
    res = run(command, "--help")
    assert res.returncode == 0
    for words in ("--gpu-product", "amd.com/gpu.product-name", "canary baseline", "exit status", "  3  the Kubernetes"):
        assert words in res.stdout, words
    assert f"vllm-rocm qualification {command} " in res.stdout  # the example
