"""The qualification Job and the report in a ConfigMap (templates/qualification-job.yaml, _qualification.tpl), rendered
with the real helm: what the Job runs and may write, where its pod runs, how the Deployment takes its mode and report
from the ConfigMap, that the ConfigMap is named after what the report depends on, and what the chart refuses.
The Job end to end (a real kubelet runs it, the Deployment rolls onto its report): tests/kube/test_release_on_node.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from vllm_rocm_known_issues.evaluator import MODES

from tests.support.helm_chart import arg_value, container, kinds, notes, pod_spec, render, render_error

REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"
PRODUCT = "AMD_Instinct_MI300X_OAM"
JOB = {"qualification.job.enabled": True, "qualification.gpuProduct": PRODUCT}
LABEL = "amd.com/gpu.product-name"
MODE_VAR = "$(VLLM_ROCM_CUDAGRAPH_MODE)"


def job_docs(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return render({**JOB, **(values or {})}, reference=False)


def the_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [job] = kinds(docs)["Job"]
    return job


def steps(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = job["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["initContainers"] + spec["containers"]}


def configmap(docs: list[dict[str, Any]]) -> str:
    return the_job(docs)["metadata"]["annotations"]["vllm-rocm/qualification-configmap"]


def test_job_runs_before_the_deployment_changes_with_rights_to_one_configmap() -> None:
    docs = job_docs()
    by_kind = kinds(docs)
    hooks = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    assert {(d["kind"], d["metadata"]["annotations"]["helm.sh/hook"]) for d in hooks} >= {
        (k, "pre-install,pre-upgrade") for k in ("ServiceAccount", "Role", "RoleBinding", "Job")
    }
    # RBAC first (weight -10), then the Job; the last Job stays for `kubectl logs` until the next one.
    weights = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks if d["kind"] != "Pod"}
    assert weights["ServiceAccount"] < weights["Job"] and weights["Role"] < weights["Job"]
    job = the_job(docs)
    assert job["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 7200
    name = configmap(docs)
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    role = next(r for r in by_kind["Role"] if r["metadata"]["name"] == account)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name], "verbs": ["get", "update"]},
    ]
    # Its pod is never one of the servers: the Service, PDB and NetworkPolicy select by the server's labels.
    selector = by_kind["Service"][0]["spec"]["selector"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in selector.items()), (labels, selector)


def test_job_qualifies_the_deployments_command_on_a_node_of_the_product() -> None:
    docs = job_docs({"maxModelLen": 4096, "extraArgs": ["--max-num-batched-tokens", "8192"]})
    job = the_job(docs)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {LABEL: PRODUCT}
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    s = steps(job)
    assert list(s) == ["current", "qualify", "publish"]
    server = container(pod_spec(docs), "vllm")
    q = s["qualify"]
    assert q["image"] == server["image"] and q["env"] == server["env"][: len(q["env"])]
    assert q["resources"]["limits"]["amd.com/gpu"] == server["resources"]["limits"]["amd.com/gpu"]
    args = q["args"]
    assert args[:3] == ["vllm-rocm", "qualify", "run"]
    assert arg_value(args, "--model") == server["args"][0]
    assert arg_value(args, "--gpu-product") == PRODUCT
    assert arg_value(args, "--canary-problems") == "8"  # the sidecar's canary's, so that it takes the baseline
    assert arg_value(args, "--modes").split(",") == list(MODES)  # nothing refused for the defaults
    # The deployment's own entrypoint and arguments, less what qualify sets per server.
    command = shlex.split(arg_value(args, "--command"))
    assert command[: len(server["command"])] == server["command"] and "{mode_args}" in command
    extra = shlex.split(arg_value(args, "--server-args"))
    assert extra == ["--tensor-parallel-size", "1", "--max-model-len", "4096", "--max-num-batched-tokens", "8192"]
    # The API is for the sidecar image's steps only; every step gets the same target.
    for step in ("current", "publish"):
        assert s[step]["image"] == container(pod_spec(docs), "health")["image"]
        assert any(m["name"] == "kube-api-access" for m in s[step]["volumeMounts"])
        assert arg_value(s[step]["args"], "--configmap") == configmap(docs)
        assert arg_value(s[step]["args"], "--gpu-product") == PRODUCT
        assert arg_value(s[step]["args"], "--modes") == arg_value(args, "--modes")
    assert not any(m["name"] == "kube-api-access" for m in q["volumeMounts"])
    # A current report skips the rest; only exit 0/1 of `current` go on.
    assert "touch /out/current" in s["current"]["command"][2] and '[ "$rc" -le 1 ]' in s["current"]["command"][2]
    assert "/out/current" in q["command"][2] and "/out/current" in s["publish"]["command"][2]


def test_deployment_takes_mode_and_report_from_the_jobs_configmap() -> None:
    docs = job_docs()
    name = configmap(docs)
    spec = pod_spec(docs)
    vllm, health = container(spec, "vllm"), container(spec, "health")
    cc = json.loads(arg_value(vllm["args"], "--compilation-config"))
    assert cc["cudagraph_mode"] == MODE_VAR
    # The kubelet expands it from the ConfigMap's `mode`; the chart's entry is last, so no extraEnv entry overrides it.
    assert vllm["env"][-1] == {
        "name": "VLLM_ROCM_CUDAGRAPH_MODE",
        "valueFrom": {"configMapKeyRef": {"name": name, "key": "mode"}},
    }
    assert arg_value(health["args"], "--qualification").endswith("/report.json")
    assert arg_value(health["args"], "--gpu-product") == PRODUCT
    assert "--expected-mode" not in health["args"]  # the report's recommendation, which the sidecar expects
    assert {"name": "canary-reference", "configMap": {"name": name}} in spec["volumes"]
    assert spec["nodeSelector"] == {LABEL: PRODUCT}
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]  # the Job's to write
    eff = json.loads(
        kinds(docs)["Deployment"][0]["spec"]["template"]["metadata"]["annotations"]["vllm-rocm/effective-settings"]
    )
    assert eff["modeFrom"] == {"configMap": name, "candidates": list(MODES)} and "configMode" not in eff
    assert f"from the qualification ConfigMap {name}" in notes({**JOB}, reference=False)


def test_configmap_is_named_after_what_the_report_depends_on() -> None:
    base = configmap(job_docs())
    assert configmap(job_docs()) == base
    # Not part of the qualification: same report, no new Job run.
    assert configmap(job_docs({"replicas": 3, "sidecar.canaryInterval": 120})) == base
    for changed in (
        {"model.name": "Qwen/Qwen3-8B"},
        {"vllm.release": "0.26.0"},
        {"maxModelLen": 4096},
        {"image.tag": "other"},
        {"qualification.gpuProduct": "AMD_Instinct_MI355X"},
        {"qualification.job.args": ["--rounds", "5"]},
        {"qualification.job.modes": ["NONE", "PIECEWISE"]},
        {"extraEnv": [{"name": "HF_HUB_OFFLINE", "value": "1"}]},
    ):
        assert configmap(job_docs(changed)) != base, changed


def test_job_qualifies_only_modes_the_guard_lets_through() -> None:
    issue = "aiter-fa-full-cudagraph-always"  # FULL on unpatched 0.10.2 AITER FA (the chart's default backend there)
    values = {"vllm.release": "0.10.2", "vllm.patched": False, "compilation.cudagraphMode": "FULL"}
    assert issue in render_error(values)
    docs = job_docs({**values, "compilation.cudagraphMode": ""})
    modes = arg_value(steps(the_job(docs))["qualify"]["args"], "--modes").split(",")
    assert "FULL" not in modes and "NONE" in modes, modes
    # qualification.job.modes narrows; a list the guard empties has nothing to qualify.
    docs = job_docs({**values, "compilation.cudagraphMode": "", "qualification.job.modes": ["NONE", "FULL"]})
    assert arg_value(steps(the_job(docs))["qualify"]["args"], "--modes") == "NONE"
    err = render_error(
        {**JOB, **values, "compilation.cudagraphMode": "", "qualification.job.modes": ["FULL"]}, reference=False
    )
    assert "nothing to qualify" in err and "FULL:" in err and issue in err, err


def test_from_configmap_with_an_explicit_mode_is_judged_at_render() -> None:
    docs = render({"qualification.fromConfigMap": "qual-1", "compilation.cudagraphMode": "PIECEWISE"}, reference=False)
    vllm, health = container(pod_spec(docs), "vllm"), container(pod_spec(docs), "health")
    assert json.loads(arg_value(vllm["args"], "--compilation-config"))["cudagraph_mode"] == "PIECEWISE"
    assert not any(e["name"] == "VLLM_ROCM_CUDAGRAPH_MODE" for e in vllm["env"])
    assert arg_value(health["args"], "--expected-mode") == "PIECEWISE"
    assert arg_value(health["args"], "--qualification").endswith("/report.json")
    assert "Job" not in kinds(docs)
    # From the ConfigMap without a mode: decided as the pod starts.
    docs = render({"qualification.fromConfigMap": "qual-1"}, reference=False)
    env = container(pod_spec(docs), "vllm")["env"]
    assert env[-1]["valueFrom"]["configMapKeyRef"] == {"name": "qual-1", "key": "mode"}


@pytest.mark.parametrize(
    "values,why",
    [
        ({"qualification.job.enabled": True}, "needs qualification.gpuProduct"),
        ({**JOB, "qualification.fromConfigMap": "q"}, "give one source of the qualification"),
        ({**JOB, "qualification.report": REPORT.read_text()}, "give one source of the qualification"),
        ({**JOB, "compilation.captureSizes": [1, 2, 4]}, "qualify sets only cudagraph_mode"),
        ({**JOB, "compilation.compilationConfig": {"max_cudagraph_capture_size": 64}}, "qualify sets only"),
        ({**JOB, "multiNode.enabled": True}, "multiNode"),
        ({"qualification.fromConfigMap": "q", "multiNode.enabled": True}, "multiNode"),
        ({**JOB, "canary.baseline": "{}"}, "give the canary's accuracy reference once"),
        ({**JOB, "qualification.gpuProduct": "not a label value"}, "gpuProduct"),
        ({**JOB, "qualification.job.modes": ["FAST"]}, "modes"),
        # qualify records the baseline with its own problem set: the sidecar would refuse another.
        ({**JOB, "sidecar.canarySeed": 7}, "seed 20251202"),
        ({**JOB, "sidecar.canaryLongPrompts": 0}, "seed 20251202"),
    ],
)
def test_refused(values: dict[str, Any], why: str) -> None:
    assert why in render_error(values, reference=False)


def test_a_report_for_another_gpu_product_is_refused_and_its_own_pins_the_pods() -> None:
    report = json.loads(REPORT.read_text())
    match = {
        "vllm.release": "0.26.0",
        "model.name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "model.servedName": "smollm2-135m-instruct",
        "sidecar.canaryLongPrompts": 0,
    }
    named = json.dumps({**report, "gpu_product": "NVIDIA_H200"})
    err = render_error({**match, "qualification.report": named, "qualification.gpuProduct": PRODUCT}, reference=False)
    assert "measured on GPU product NVIDIA_H200, qualification.gpuProduct is " + PRODUCT in err
    docs = render({**match, "qualification.report": named}, reference=False)
    assert pod_spec(docs)["nodeSelector"] == {LABEL: "NVIDIA_H200"}
    assert arg_value(container(pod_spec(docs), "health")["args"], "--gpu-product") == "NVIDIA_H200"
    # A product given for a report that names none: the sidecar could not check it, so neither renders.
    err = render_error({**match, "qualification.report": REPORT.read_text(), "qualification.gpuProduct": PRODUCT},
                       reference=False)  # fmt: skip
    assert "does not say which GPU product it measured" in err, err
    # The older spelling still reads, and a report that names no product pins nothing.
    docs = render({**match, "qualification": REPORT.read_text()}, reference=False)
    assert "nodeSelector" not in pod_spec(docs)
    assert "--gpu-product" not in container(pod_spec(docs), "health")["args"]


def test_a_users_kubelet_reference_is_still_refused_beside_the_charts_own() -> None:
    err = render_error({**JOB, "extraArgs": ["--served-model-name", "$(POD_NAME)"]}, reference=False)
    assert "extraArgs[1]" in err and "the kubelet expands" in err
    assert MODE_VAR not in err.split("extraArgs[1]")[0][-200:]
