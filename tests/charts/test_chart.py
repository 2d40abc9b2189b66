"""Helm chart tests: lint, render value sets, validate every object offline, contract checks, schema, alert rules.

Uses the real helm (.work/bin/helm), kubernetes-validate, check-jsonschema and promtool; no cluster needed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_stack.chart_values_table import params, readme_table, table
from vllm_rocm_stack.config import pinned_versions

from tests.support.chart_values import VALUE_SETS
from tests.support.helm_chart import (
    CAPS,
    CHART,
    DEFAULT_MODEL,
    MODES,
    ROOT,
    arg_value,
    baseline_for,
    container,
    helm,
    kinds,
    pod_spec,
    render,
    render_error,
)
from tests.support.markdown import anchors

VENV_BIN = Path(sys.executable).parent
KUBE_VERSION = pinned_versions()["KUBE_VERSION"]  # kubernetes-validate's schemas


def _tool(name: str) -> str:
    path = VENV_BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found (run `make setup`)")
    return found


def test_lint_strict() -> None:
    proc = helm("lint", "--strict", str(CHART), *CAPS[:2])
    assert "0 chart(s) failed" in proc.stdout


def test_schema_is_valid_draft07() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    subprocess.run(
        [_tool("check-jsonschema"), "--check-metaschema", str(CHART / "values.schema.json")],
        check=True,
        capture_output=True,
        timeout=60,
    )
    subprocess.run(
        [_tool("check-jsonschema"), "--schemafile", str(CHART / "values.schema.json"), str(CHART / "values.yaml")],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_readme_values_table_is_current() -> None:
    """The README table is exactly what the @param comments of values.yaml generate."""
    assert readme_table() == table(), "README values table is stale: make generate"


def test_every_value_documented() -> None:
    """Every leaf key of values.yaml has an @param comment (and so a README row)."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    readme = {key for key, _ in params(text)}

    def leaves(d: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            key = f"{prefix}{k}"
            if (
                isinstance(v, dict)
                and v
                and key
                not in (
                    "resources",
                    "podSecurityContext",
                    "securityContext",
                    "sidecar.resources",
                    "sidecar.securityContext",
                )
            ):
                out += leaves(v, key + ".")
            else:
                out.append(key)
        return out

    missing = [k for k in leaves(values) if k not in readme]
    assert not missing, f"undocumented values: {missing}"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_render_and_validate(name: str, tmp_path: Path) -> None:
    docs = render(VALUE_SETS[name])
    assert docs
    builtin = [
        d
        for d in docs
        if "monitoring.coreos.com" not in d["apiVersion"]
        and "leaderworkerset" not in d["apiVersion"]
        and "keda.sh" not in d["apiVersion"]
    ]
    for lws in kinds(docs).get("LeaderWorkerSet", []):  # CRD: validate its pod templates as Pods
        for role in ("leaderTemplate", "workerTemplate"):
            tmpl = lws["spec"]["leaderWorkerTemplate"][role]
            builtin.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"lws-{role.lower()}", **tmpl.get("metadata", {})},
                    "spec": tmpl["spec"],
                }
            )
    out = tmp_path / "objects.yaml"
    out.write_text(yaml.safe_dump_all(builtin))
    proc = subprocess.run(
        [_tool("kubernetes-validate"), "-k", KUBE_VERSION, "--strict", "--quiet", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rule in kinds(docs).get("PrometheusRule", []):
        rules_file = tmp_path / "rules.yaml"
        rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        subprocess.run(["promtool", "check", "rules", str(rules_file)], check=True, capture_output=True, timeout=60)


@pytest.mark.parametrize("mode", MODES)
def test_compilation_config_always_json_never_dash_o(mode: str) -> None:
    docs = render(
        {
            "compilation.cudagraphMode": mode,
            "compilation.captureSizes": [1, 2, 4],
            "compilation.compilationConfig": {"max_cudagraph_capture_size": 4},
        }
    )
    args = container(pod_spec(docs), "vllm")["args"]
    cfg = json.loads(arg_value(args, "--compilation-config"))
    assert cfg == {"cudagraph_mode": mode, "cudagraph_capture_sizes": [1, 2, 4], "max_cudagraph_capture_size": 4}
    assert not any(a == "-O" or a.startswith("-O") for a in args)
    assert "--enforce-eager" not in args


def test_json_args_survive_quotes() -> None:
    """JSON values are list items, never re-quoted by a shell: a quote inside a value survives."""
    docs = render(
        {
            "compilation.compilationConfig": {"debug_dump_path": '/tmp/it\'s "here"'},
            "speculativeConfig": SPEC,
            "attentionBackend": "ROCM_ATTN",
        }
    )
    vllm = container(pod_spec(docs), "vllm")
    assert vllm["command"] == ["/opt/vllm-rocm/bin/vllm-serve.sh"]  # the image's entrypoint: `vllm serve "$@"`
    assert json.loads(arg_value(vllm["args"], "--compilation-config"))["debug_dump_path"] == '/tmp/it\'s "here"'
    assert json.loads(arg_value(vllm["args"], "--speculative-config")) == SPEC


def test_enforce_eager_only_when_asked() -> None:
    args = container(pod_spec(render({"enforceEager": True})), "vllm")["args"]
    assert "--enforce-eager" in args
    side = container(pod_spec(render({"enforceEager": True})), "health")["args"]
    assert arg_value(side, "--expected-mode") == "NONE"


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_gpu_equals_tp_and_shm_formula(tp: int) -> None:
    spec = pod_spec(render({"tensorParallelSize": tp}))
    vllm = container(spec, "vllm")
    assert vllm["resources"]["requests"]["amd.com/gpu"] == tp
    assert vllm["resources"]["limits"]["amd.com/gpu"] == tp
    assert arg_value(vllm["args"], "--tensor-parallel-size") == str(tp)
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": f"{4 * tp + 2}Gi"}
    assert "runtimeClassName" not in spec
    override = pod_spec(render({"shm.sizeLimit": "10Gi"}))
    assert next(v for v in override["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "10Gi"


def test_probes_and_sidecar_contract() -> None:
    spec = pod_spec(render({"canary.baseline": baseline_for(DEFAULT_MODEL)}))
    vllm, side = container(spec, "vllm"), container(spec, "health")
    assert vllm["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    # Readiness = the sidecar's /readyz, probed on the container that owns the named port `health`
    # (kubelet resolves a named probe port against the probed container's own ports).
    assert side["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert "readinessProbe" not in vllm
    assert vllm["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert vllm["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert vllm["startupProbe"]["failureThreshold"] * vllm["startupProbe"]["periodSeconds"] == 3600
    # Only the sidecar gets API credentials.
    assert spec["automountServiceAccountToken"] is False
    assert not any(m["name"] == "kube-api-access" for m in vllm["volumeMounts"])
    mount = next(m for m in side["volumeMounts"] if m["name"] == "kube-api-access")
    assert mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert side["ports"][0] == {"name": "health", "containerPort": 9400, "protocol": "TCP"}
    # What runs is `command` + `args`: the image's ENTRYPOINT (`vllm-rocm-health serve`) is replaced, not prefixed.
    assert side["command"] == ["vllm-rocm-health"]
    assert side["args"][:7] == [
        "serve",
        "--log-source",
        "k8s",
        "--k8s-container",
        "vllm",
        "--vllm-url",
        "http://127.0.0.1:8000",
    ]
    assert arg_value(side["args"], "--canary-baseline") == "/etc/vllm-rocm-health/baseline.json"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in side["env"] if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    sc = side["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert vllm["securityContext"]["privileged"] is False
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "amd.com/gpu.product-name"


def test_canary_existing_configmap() -> None:
    docs = render({"canary.existingConfigMap": "my-baseline"})
    assert "ConfigMap" not in kinds(docs)
    spec = pod_spec(docs)
    assert next(v for v in spec["volumes"] if v["name"] == "canary-reference")["configMap"]["name"] == "my-baseline"
    side = container(spec, "health")
    assert arg_value(side["args"], "--canary-baseline") == "/etc/vllm-rocm-health/baseline.json"
    assert {"name": "canary-reference", "mountPath": "/etc/vllm-rocm-health", "readOnly": True} in side["volumeMounts"]
    # One reference, never two: the chart would have to pick one silently.
    assert "give the canary's accuracy reference once" in render_error(
        {"canary.existingConfigMap": "my-baseline", "canary.baseline": baseline_for(DEFAULT_MODEL)}
    )


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # the API server's rule, <= 63


@pytest.mark.parametrize(
    "release,label",
    [
        ("0.10.2", "0.10.2"),
        ("0.10.2+rocm700", "0.10.2_rocm700"),
        ("0.10.2.dev383+g1234abc.rocm700", "0.10.2.dev383_g1234abc.rocm700"),
        ("0.11.0+" + "g" * 70, "0.11.0_" + "g" * 56),
        ("0.11.0+" + "g" * 55 + ".x", "0.11.0_" + "g" * 55),
    ],
)
def test_version_label_is_a_label_value(release: str, label: str) -> None:
    """vllm.release is a PEP 440 version; ROCm builds' local versions carry a "+" that the API server refuses in a
    label (found by tests/kube: a real API server refused every object of such a render)."""
    docs = render({"vllm.release": release, "compilation.cudagraphMode": "PIECEWISE"})
    labelled = [d for d in docs if "app.kubernetes.io/version" in d["metadata"]["labels"]]
    assert len(labelled) >= len(docs) - 2  # all but the helm test hook's pod and its NetworkPolicy
    for doc in labelled:
        value = doc["metadata"]["labels"]["app.kubernetes.io/version"]
        assert value == label and len(value) <= 63 and LABEL_VALUE.match(value), (doc["kind"], value)


def test_image_digest_wins() -> None:
    spec = pod_spec(render({"image.tag": "v1", "image.digest": "sha256:" + "b" * 64}))
    assert container(spec, "vllm")["image"] == "ghcr.io/example/vllm-rocm@sha256:" + "b" * 64


def test_aiter_env_and_attention_backend() -> None:
    off = {"aiter.enabled": False, "compilation.cudagraphMode": "PIECEWISE"}
    env = {e["name"]: e.get("value") for e in container(pod_spec(render(off)), "vllm")["env"]}
    assert env["VLLM_ROCM_USE_AITER"] == "0"
    args = container(pod_spec(render({"attentionBackend": "ROCM_AITER_FA"})), "vllm")["args"]
    assert arg_value(args, "--attention-backend") == "ROCM_AITER_FA"
    env = {e["name"]: e.get("value") for e in container(pod_spec(render()), "vllm")["env"]}
    assert env["VLLM_CACHE_ROOT"] == "/cache/vllm" and env["TORCHINDUCTOR_CACHE_DIR"] == "/cache/inductor"


def test_monitoring_gated_by_capabilities() -> None:
    on = {
        "metrics.serviceMonitor.enabled": True,
        "metrics.podMonitor.enabled": True,
        "metrics.prometheusRule.enabled": True,
    }
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule"} <= set(kinds(render(on)))
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & set(kinds(render(on, caps=False)))
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & set(kinds(render()))


def test_monitors_label_each_target_with_its_release() -> None:
    """VllmDeploymentNoReadyPod groups the sidecars of one release by (namespace, job, release): both monitors set
    `release` on every endpoint from the pod's app.kubernetes.io/instance label (one of the selector labels, so on
    every pod they scrape), which Prometheus's Kubernetes discovery exposes under this meta label."""
    on = {"metrics.serviceMonitor.enabled": True, "metrics.podMonitor.enabled": True}
    docs = render(on)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"]
    endpoints = [
        *next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]["endpoints"],
        *next(d for d in docs if d["kind"] == "PodMonitor")["spec"]["podMetricsEndpoints"],
    ]
    assert len(endpoints) == 4
    for e in endpoints:
        assert {
            "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": "release",
        } in e["relabelings"], e
    rules = (CHART / "files" / "alerts.rules.yaml").read_text()
    assert "by (namespace, job, release)" in rules


def test_prometheusrule_groups_equal_rules_file() -> None:
    rule = kinds(render({"metrics.prometheusRule.enabled": True}))["PrometheusRule"][0]
    source = yaml.safe_load((CHART / "files" / "alerts.rules.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]


def test_prometheusrule_job_matcher_and_runbook_base() -> None:
    docs = render(
        {
            "metrics.prometheusRule.enabled": True,
            "metrics.prometheusRule.jobMatcher": 'job="my-health"',
            "metrics.prometheusRule.runbookBaseUrl": "https://git.example/runbook.md",
        }
    )
    groups = kinds(docs)["PrometheusRule"][0]["spec"]["groups"]
    text = (CHART / "files" / "alerts.rules.yaml").read_text()
    expected = yaml.safe_load(
        text.replace('job=~"vllm-rocm-health.*"', 'job="my-health"').replace(
            "charts/vllm-rocm/docs/runbook.md", "https://git.example/runbook.md"
        )
    )
    assert groups == expected["groups"]
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    assert all("vllm-rocm-health.*" not in e for e in exprs) and any('job="my-health"' in e for e in exprs)


def test_multinode_leaderworkerset() -> None:
    docs = render({"multiNode.enabled": True, "multiNode.nodes": 3, "tensorParallelSize": 8})
    k = kinds(docs)
    assert "Deployment" not in k
    lws = k["LeaderWorkerSet"][0]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 3
    leader = container(tmpl["leaderTemplate"]["spec"], "vllm")
    script = leader["command"][2]
    assert leader["command"][:2] == ["/bin/bash", "-ec"] and script.startswith("ray start --head --port=6379")
    assert "need=24" in script and 'exec "$@"' in script
    subprocess.run(["bash", "-n", "-c", script], check=True, timeout=10)  # the leader script parses
    serve = leader["args"]
    assert serve[:2] == ["/opt/vllm-rocm/bin/vllm-serve.sh", "meta-llama/Llama-3.1-8B-Instruct"]
    assert arg_value(serve, "--tensor-parallel-size") == "8" and arg_value(serve, "--pipeline-parallel-size") == "3"
    assert json.loads(arg_value(serve, "--compilation-config"))["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    worker = container(tmpl["workerTemplate"]["spec"], "vllm")["args"][0]
    assert "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block" in worker
    assert container(tmpl["leaderTemplate"]["spec"], "health")["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert [c["name"] for c in tmpl["workerTemplate"]["spec"]["containers"]] == ["vllm"]
    gpus = container(tmpl["workerTemplate"]["spec"], "vllm")["resources"]["limits"]["amd.com/gpu"]
    assert gpus == 8
    assert k["Service"][0]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_helm_test_pod() -> None:
    tests = [
        d for d in render() if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test" and d["kind"] == "Pod"
    ]
    assert len(tests) == 1
    script = tests[0]["spec"]["containers"][0]["args"][0]
    compile(script, "helm-test", "exec")  # the embedded program is valid Python
    selector = kinds(render())["Service"][0]["spec"]["selector"]
    labels = tests[0]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in selector.items()), "the Service would select the test pod"
    assert "/v1/completions" in script and "/readyz" in script and "vllm_canary_passing" in script


SPEC = {"method": "eagle3", "num_speculative_tokens": 2}


@pytest.mark.parametrize(
    "values,message",
    [
        # Known-wrong CUDA-graph combinations (known-issues/known-issues.json; tests/charts/test_known_issues_chart.py).
        (
            {"compilation.cudagraphMode": "FULL", "vllm.release": "0.10.2", "vllm.patched": False},
            "aiter-fa-full-cudagraph-always [wrong_tokens]",
        ),
        ({"compilation.cudagraphMode": "FULL", "vllm.release": "0.10.2", "vllm.patched": False}, "FULL_AND_PIECEWISE"),
        (
            {"compilation.cudagraphMode": "FULL_AND_PIECEWISE", "vllm.release": "0.10.1.1", "vllm.patched": False},
            "aiter-fa-cudagraph-dead-flag [crash]",
        ),
        (
            {
                "vllm.release": "0.14.0",
                "compilation.cudagraphMode": "FULL",
                "attentionBackend": "ROCM_AITER_FA",
                "speculativeConfig": SPEC,
            },
            "speculative decoding",
        ),
        (
            {
                "compilation.cudagraphMode": "FULL_DECODE_ONLY",
                "vllm.release": "0.10.2",
                "vllm.patched": False,
                "speculativeConfig": SPEC,
            },
            "speculative decoding",
        ),
        ({"attentionBackend": "ROCM_AITER_FA", "vllm.release": "0.11.0"}, "needs vLLM >= 0.14"),
        ({"autoscaling.hpa.enabled": True, "autoscaling.keda.enabled": True}, "only one of"),
        ({"autoscaling.hpa.enabled": True, "multiNode.enabled": True}, "not supported with multiNode"),
        # Schema: bad enum, negative / zero sizes, wrong types, unknown keys.
        ({"compilation.cudagraphMode": "FULLY"}, "/compilation/cudagraphMode"),
        ({"compilation.cudagraphMode": "full"}, "/compilation/cudagraphMode"),
        ({"compilation.captureSizes": [0, 8]}, "at '/compilation/captureSizes/0': minimum: got 0, want 1"),
        ({"compilation.captureSizes": [-8]}, "/compilation/captureSizes/0"),
        ({"compilation.captureSizes": "1,2,4"}, "/compilation/captureSizes"),
        ({"maxNumSeqs": -1}, "/maxNumSeqs"),
        ({"shm.perGpuGi": -4}, "/shm/perGpuGi"),
        ({"tensorParallelSize": 3}, "/tensorParallelSize"),
        ({"tensorParallelSize": "8"}, "/tensorParallelSize"),
        ({"enforceEager": "yes"}, "/enforceEager"),
        ({"vllm.release": "latest"}, "/vllm/release"),
        ({"image.digest": "latest"}, "/image/digest"),
        ({"securityContext.privileged": True}, "/securityContext/privileged"),
        ({"sidecar.securityContext.runAsNonRoot": False}, "/sidecar/securityContext/runAsNonRoot"),
        ({"compilation.compilationConfig": {"cudagraph_mode": "FULL"}}, "/compilation/compilationConfig"),
        ({"metrics.prometheusRule.jobMatcher": "vllm"}, "/metrics/prometheusRule/jobMatcher"),
        ({"unknownKey": 1}, "additional properties 'unknownKey' not allowed"),
        ({"compilation.mode": "FULL"}, "additional properties 'mode' not allowed"),
    ],
)
def test_rejects_bad_values(values: dict[str, Any], message: str) -> None:
    assert message in render_error(values)


@pytest.mark.parametrize(
    "values",
    [
        # Patched image: FULL on AITER FA is fine (vLLM downgrades it with a warning).
        {"compilation.cudagraphMode": "FULL", "attentionBackend": "ROCM_AITER_FA"},
        {"compilation.cudagraphMode": "FULL", "vllm.release": "0.10.2"},
        # 0.11+ carries the fix upstream: "unpatched" changes nothing.
        {"compilation.cudagraphMode": "FULL", "vllm.patched": False, "vllm.release": "0.11.0"},
        # Unpatched but AITER MHA off: FULL is not on AITER FA.
        {"compilation.cudagraphMode": "FULL", "vllm.patched": False, "aiter.mha": False, "vllm.release": "0.10.2"},
        # Unpatched 0.10.2 with FULL_AND_PIECEWISE: correct without spec decode.
        {"compilation.cudagraphMode": "FULL_AND_PIECEWISE", "vllm.patched": False, "vllm.release": "0.10.2"},
        # Eager: no graphs, nothing to get wrong.
        {"compilation.cudagraphMode": "FULL", "vllm.patched": False, "vllm.release": "0.10.2", "enforceEager": True},
        # 0.20+: AITER env no longer auto-selects AITER FA, and its support is UNIFORM_BATCH.
        {"compilation.cudagraphMode": "FULL", "vllm.patched": False, "vllm.release": "0.20.0"},
        {
            "compilation.cudagraphMode": "FULL",
            "attentionBackend": "ROCM_AITER_FA",
            "vllm.release": "0.20.0",
            "speculativeConfig": SPEC,
        },
        # Patched: FULL_DECODE_ONLY with spec decode falls back to PIECEWISE inside vLLM (safe).
        {
            "compilation.cudagraphMode": "FULL_DECODE_ONLY",
            "attentionBackend": "ROCM_AITER_FA",
            "speculativeConfig": SPEC,
        },
        {"compilation.cudagraphMode": "PIECEWISE", "attentionBackend": "ROCM_AITER_FA", "speculativeConfig": SPEC},
        # Flags the typed values do not own (tests/charts/test_guard.py has the refused ones).
        {"extraArgs": ["--enable-prefix-caching", "--cudagraph-metrics", "--max-num-batched-tokens=8192"]},
    ],
)
def test_accepts_good_combinations(values: dict[str, Any]) -> None:
    assert render(values)


def test_alert_rules_check_and_unit_tests() -> None:
    subprocess.run(
        ["promtool", "check", "rules", str(CHART / "files" / "alerts.rules.yaml")],
        check=True,
        capture_output=True,
        timeout=60,
    )
    proc = subprocess.run(
        ["promtool", "test", "rules", str(Path(__file__).parent / "alerts.test.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_tests_and_runbook() -> None:
    rules = yaml.safe_load((CHART / "files" / "alerts.rules.yaml").read_text())
    tests = yaml.safe_load((Path(__file__).parent / "alerts.test.yaml").read_text())
    headings = anchors((CHART / "docs" / "runbook.md").read_text())
    fired: set[str] = set()
    quiet: set[str] = set()
    for t in tests["tests"]:
        for case in t["alert_rule_test"]:
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule["alert"]
            assert rule.get("for"), name
            assert rule["labels"]["severity"] in ("critical", "warning"), name
            assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
            anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
            assert anchor in headings, f"runbook has no section #{anchor} for {name}"
            assert name in fired and name in quiet, f"{name}: needs a firing and a quiet test"
    assert 'job=~"vllm-rocm-health' in (CHART / "files" / "alerts.rules.yaml").read_text()


def test_alert_metrics_are_contract_names() -> None:
    """Every sidecar metric the rules use is in docs/contracts.md (counters with their _total suffix)."""
    contract = (ROOT / "docs" / "contracts.md").read_text()
    names = set(re.findall(r"^\| (vllm_\w+) \|", contract, flags=re.M))
    assert names, "contract table not found"
    text = (CHART / "files" / "alerts.rules.yaml").read_text()
    used = {m for m in re.findall(r"\b(vllm_[a-z_]+)\{", text)}
    assert used, "no metrics found in the rules"
    unknown = used - names
    assert not unknown, f"metrics not in docs/contracts.md: {unknown}"


def pdb_spec(values: dict[str, Any]) -> dict[str, Any]:
    return next(d for d in render(values) if d["kind"] == "PodDisruptionBudget")["spec"]


def test_pdb_keeps_the_last_ready_pod_and_lets_unready_ones_go() -> None:
    """minAvailable counts Ready pods, and Ready means the canary passed: a drain never takes the last right server
    (tests/kube/test_release_on_node.py evicts through a real API server); not-Ready pods protect nothing."""
    spec = pdb_spec({})
    assert spec["minAvailable"] == 1 and "maxUnavailable" not in spec
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    spec = pdb_spec({"pdb": {"maxUnavailable": 1}})  # the operator's explicit choice of drains that never wait
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
    assert pdb_spec({"pdb": {"minAvailable": "50%"}})["minAvailable"] == "50%"


@pytest.mark.parametrize(
    "pdb", [{"minAvailable": "one"}, {"minAvailable": -1}, {"maxUnavailable": "1x"}, {"maxUnavailable": -1}]
)
def test_pdb_refuses_malformed_budgets(pdb: dict[str, Any]) -> None:
    assert "pdb" in render_error({"pdb": pdb})
