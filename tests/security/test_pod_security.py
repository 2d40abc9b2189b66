"""What the chart README's "Security" section promises, checked on every pod of every value set the chart tests render
(the server, each LeaderWorkerSet pod, the `helm test` pod), and the values the schema refuses because they would
break a promise."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from tests.support.chart_values import VALUE_SETS
from tests.support.helm_chart import container, kinds, pod_spec, render, render_error

MIN_UID = 10000  # above the UIDs of a node's users (checkov CKV_K8S_40)


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pod specs by a readable name: Deployment template, LeaderWorkerSet templates, bare Pods."""
    out = {}
    for d in docs:
        if d["kind"] == "Deployment":
            out["deployment"] = d["spec"]["template"]["spec"]
        elif d["kind"] == "LeaderWorkerSet":
            for role in ("leaderTemplate", "workerTemplate"):
                out[role] = d["spec"]["leaderWorkerTemplate"][role]["spec"]
        elif d["kind"] == "Pod":
            out[d["metadata"]["name"]] = d["spec"]
    return out


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_container_non_root_read_only_unprivileged(name: str) -> None:
    docs = render(VALUE_SETS[name])
    specs = pods(docs)
    assert specs and ("deployment" in specs or "leaderTemplate" in specs), specs.keys()
    for pod_name, spec in specs.items():
        psc = spec.get("securityContext", {})
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", pod_name
        assert spec.get("automountServiceAccountToken") is False, pod_name
        for c in spec["containers"]:
            where = f"{name}: {pod_name}/{c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, where
            assert sc.get("runAsUser", psc.get("runAsUser", 0)) >= MIN_UID, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert not sc.get("privileged"), where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            # API credentials: the sidecar only.
            token = any(m["name"] == "kube-api-access" for m in c.get("volumeMounts", []))
            assert token == (c["name"] == "health"), where
            # Secrets as files, never as environment variables.
            assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in c.get("env", [])), where


def writable_paths(spec: dict[str, Any], c: dict[str, Any]) -> list[PurePosixPath]:
    volumes = {v["name"]: v for v in spec["volumes"]}
    out = []
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        if not m.get("readOnly") and ("emptyDir" in v or "persistentVolumeClaim" in v):
            out.append(PurePosixPath(m["mountPath"]))
    return out


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"modelCache.enabled": False, "compileCache.enabled": False},
        {"hfToken.existingSecret": "hf", "multiNode.enabled": True, "tensorParallelSize": 8},
    ],
)
def test_every_path_vllm_writes_is_a_volume(values: dict[str, Any]) -> None:
    """With a read-only root, each directory the environment hands vLLM (and the libraries below it) must be on a
    writable volume: HOME (Triton, MIOpen, AITER, vLLM's config), /tmp, HF_HOME, the compile caches."""
    for role, spec in pods(render(values)).items():
        if role.endswith("-test"):
            continue
        vllm = container(spec, "vllm")
        writable = writable_paths(spec, vllm)
        env = {e["name"]: e.get("value") for e in vllm["env"]}
        want = {"/tmp", "/dev/shm", env["HOME"], env["HF_HOME"]}
        want |= {env[k] for k in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR") if k in env}
        for path in want:
            assert any(PurePosixPath(path).is_relative_to(w) for w in writable), f"{role}: {path} not writable"
        if values.get("hfToken.existingSecret"):
            token_dir = str(PurePosixPath(env["HF_TOKEN_PATH"]).parent)
            mount = next(m for m in vllm["volumeMounts"] if m["mountPath"] == token_dir)
            assert mount["readOnly"] and "HF_TOKEN" not in env


def test_fs_group_makes_the_caches_writable_without_a_chown_per_start() -> None:
    psc = pod_spec(render())["securityContext"]
    vllm = container(pod_spec(render()), "vllm")
    assert psc["fsGroup"] == vllm["securityContext"]["runAsGroup"]
    assert psc["fsGroupChangePolicy"] == "OnRootMismatch"


def test_every_pod_is_selected_by_a_network_policy() -> None:
    docs = render({"multiNode.enabled": True, "tensorParallelSize": 8})
    policies = kinds(docs)["NetworkPolicy"]

    def selected(labels: dict[str, str]) -> bool:
        return any(
            all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items()) for p in policies
        )

    lws = kinds(docs)["LeaderWorkerSet"][0]["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert selected(lws[role]["metadata"]["labels"]), role
    test_pod = next(d for d in docs if d["kind"] == "Pod")
    assert selected(test_pod["metadata"]["labels"])
    test_policy = next(p for p in policies if p["metadata"]["name"].endswith("-test"))
    assert test_policy["spec"]["ingress"] == [] and set(test_policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    # The server lets the test pod in even when allowFrom narrows who else may come.
    server = next(p for p in policies if not p["metadata"]["name"].endswith("-test"))
    peers = [peer for rule in server["spec"]["ingress"] for peer in rule.get("from", [])]
    assert {
        "podSelector": {
            "matchLabels": {
                k: test_pod["metadata"]["labels"][k]
                for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
            }
        }
    } in peers


@pytest.mark.parametrize(
    "values,message",
    [
        ({"securityContext.runAsNonRoot": False}, "/securityContext/runAsNonRoot"),
        ({"securityContext.runAsNonRoot": None}, "missing property 'runAsNonRoot'"),
        ({"securityContext.runAsUser": 0}, "/securityContext/runAsUser"),
        ({"securityContext.allowPrivilegeEscalation": True}, "/securityContext/allowPrivilegeEscalation"),
        ({"securityContext.capabilities.add": ["SYS_ADMIN"]}, "/securityContext/capabilities/add"),
        ({"securityContext.capabilities.drop": ["NET_RAW"]}, "/securityContext/capabilities/drop"),
        ({"securityContext.seccompProfile.type": "Unconfined"}, "/securityContext/seccompProfile/type"),
        ({"securityContext.seccompProfile": None}, "missing property 'seccompProfile'"),
        ({"podSecurityContext.seccompProfile.type": "Unconfined"}, "/podSecurityContext/seccompProfile/type"),
        ({"podSecurityContext.runAsNonRoot": False}, "/podSecurityContext/runAsNonRoot"),
        (
            {"sidecar.securityContext.allowPrivilegeEscalation": True},
            "/sidecar/securityContext/allowPrivilegeEscalation",
        ),
        ({"sidecar.securityContext.capabilities.add": ["NET_ADMIN"]}, "/sidecar/securityContext/capabilities/add"),
        ({"sidecar.securityContext.readOnlyRootFilesystem": None}, "missing property 'readOnlyRootFilesystem'"),
    ],
)
def test_schema_refuses_breaking_a_guarantee(values: dict[str, Any], message: str) -> None:
    assert message in render_error(values)


def test_read_only_root_can_be_turned_off_for_an_image_that_needs_it() -> None:
    vllm = container(pod_spec(render({"securityContext.readOnlyRootFilesystem": False})), "vllm")
    assert vllm["securityContext"]["readOnlyRootFilesystem"] is False


# --- sandbox weakening and the readiness bound (issue 18) ------------------------------------------------------------

CONTEXTS = ["podSecurityContext", "securityContext", "sidecar.securityContext"]


@pytest.mark.parametrize("where", CONTEXTS)
def test_apparmor_unconfined_is_refused_like_seccomp(where: str) -> None:
    assert f"/{where.replace('.', '/')}/appArmorProfile/type" in render_error(
        {f"{where}.appArmorProfile": {"type": "Unconfined"}}
    )
    docs = render({f"{where}.appArmorProfile": {"type": "RuntimeDefault"}})
    assert docs


@pytest.mark.parametrize("where", CONTEXTS)
@pytest.mark.parametrize(
    "selinux_type", ["spc_t", "unconfined_t", "unconfined_service_t", "container_runtime_t", "my_unconfined_t", "SPC_T"]
)
def test_an_unconfined_selinux_type_is_refused(where: str, selinux_type: str) -> None:
    err = render_error({f"{where}.seLinuxOptions": {"type": selinux_type, "level": "s0:c1,c2"}})
    assert f"{where}.seLinuxOptions.type={selinux_type}: an unconfined SELinux domain" in err, err


@pytest.mark.parametrize("where", CONTEXTS)
def test_a_confined_selinux_type_renders(where: str) -> None:
    assert render({f"{where}.seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}})


@pytest.mark.parametrize(
    "key",
    [
        "container.apparmor.security.beta.kubernetes.io/vllm",
        "container.apparmor.security.beta.kubernetes.io/health",
        "seccomp.security.alpha.kubernetes.io/pod",
        "container.seccomp.security.alpha.kubernetes.io/vllm",
    ],
)
@pytest.mark.parametrize("multinode", [False, True])
def test_the_unconfined_annotations_are_refused(key: str, multinode: bool) -> None:
    extra = {"multiNode.enabled": True, "tensorParallelSize": 8} if multinode else {}
    err = render_error({**extra, "podAnnotations": {key: "unconfined"}})
    assert f"podAnnotations {key}=unconfined" in err, err
    # A confined profile is fine, and reaches every server pod (the LeaderWorkerSet's leader and workers too).
    docs = render({**extra, "podAnnotations": {key: "runtime/default"}})
    workload = next(d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet"))["spec"]
    templates = (
        [workload["template"]]
        if "template" in workload
        else [workload["leaderWorkerTemplate"][r] for r in ("leaderTemplate", "workerTemplate")]
    )
    for template in templates:
        assert template["metadata"]["annotations"][key] == "runtime/default"


@pytest.mark.parametrize(
    "readiness,refused",
    [
        ({"periodSeconds": 10, "failureThreshold": 3}, False),
        ({"periodSeconds": 100, "failureThreshold": 3}, False),  # 300 s: the bound
        ({"periodSeconds": 10, "failureThreshold": 31}, True),  # 310 s
        ({"periodSeconds": 300, "failureThreshold": 2}, True),
        ({"periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 60}, True),  # each probe may take 60 s
        ({"periodSeconds": 60, "failureThreshold": 5, "timeoutSeconds": 60}, False),
    ],
)
def test_readiness_reacts_within_five_minutes(readiness: dict[str, int], refused: bool) -> None:
    values = {f"probes.readiness.{k}": v for k, v in readiness.items()}
    if refused:
        assert "probes.readiness: failureThreshold * max(periodSeconds, timeoutSeconds)" in render_error(values)
    else:
        probe = container(pod_spec(render(values)), "health")["readinessProbe"]
        assert all(probe[k] == v for k, v in readiness.items())


@pytest.mark.parametrize("key", ["periodSeconds", "failureThreshold", "timeoutSeconds"])
def test_the_schema_bounds_each_readiness_field(key: str) -> None:
    assert f"/probes/readiness/{key}" in render_error({f"probes.readiness.{key}": 86400})
