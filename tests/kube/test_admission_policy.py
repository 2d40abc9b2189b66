"""Where the guard lives, decided on a real API server (issue 21, item 4; the decision: docs/admission-policy.md).

A Deployment edited by hand after `helm install` to run a cudagraph mode the chart refuses: the API server admits it,
the controllers make its ReplicaSet and Pod, and what keeps it from serving is the pod's readiness (the sidecar's
/readyz), which keeps its address out of the Service's EndpointSlice. A CEL ValidatingAdmissionPolicy, tried here on
the same server, refuses the literal spelling but admits the same mode spelled through the kubelet's `$(VAR)`
expansion or a config file, and refuses a mode the chart accepts because it cannot know the image's release.

There is no node: the scheduler's binding and the kubelet's pod status are written by the test, as kwok does; the
sidecar's side (its /readyz refuses a mode it was not told to expect, or a known issue of the running release) is
tested against a real vLLM in tests/health."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import helm_chart, kube, renders

pytestmark = pytest.mark.system

NS = "llm-edited"
# A configuration the chart refuses in FULL (README: FULL with AITER FA on an unpatched 0.10.2, vllm#25104: silently
# wrong tokens) and accepts in PIECEWISE: the operator installs PIECEWISE, then edits the Deployment.
RELEASE = {"vllm.release": "0.10.2", "vllm.patched": False}
FULL_CONFIG = '{"cudagraph_mode":"FULL"}'
CONTROLLERS = ["deployment-controller", "replicaset-controller", "endpointslice-controller", "endpoints-controller"]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def controllers(control_plane: kube.ControlPlane, crds: list[str]) -> kube.ControlPlane:
    """The controllers that turn a Deployment into Pods and a Service's selector into EndpointSlices."""
    control_plane.start_controller_manager(CONTROLLERS)
    control_plane.create_namespace(NS)
    return control_plane


def installed() -> list[dict[str, Any]]:
    """What `helm install` stores for the accepted configuration (PIECEWISE), hooks left out."""
    docs = helm_chart.render({**RELEASE, "compilation.cudagraphMode": "PIECEWISE"})
    return [renders.in_namespace(d, NS) for d in docs if not renders.is_hook(d)]


def hand_edit(deployment: dict[str, Any], config: str = FULL_CONFIG) -> dict[str, Any]:
    """`kubectl edit`: the vLLM container's --compilation-config replaced, nothing else touched."""
    edited = json.loads(json.dumps(deployment))
    args = helm_chart.container(edited["spec"]["template"]["spec"], "vllm")["args"]
    args[args.index("--compilation-config") + 1] = config
    return edited


@pytest.fixture(scope="module")
def edited_pod(controllers: kube.ControlPlane) -> Iterator[dict[str, Any]]:
    plane = controllers
    err = helm_chart.render_error({**RELEASE, "compilation.cudagraphMode": "FULL"})
    assert "aiter-fa-full-cudagraph-always [wrong_tokens]" in err, f"the chart no longer refuses it: {err}"
    docs = installed()
    plane.apply(docs, NS, dry_run=False)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    plane.apply([hand_edit(deployment)], NS, dry_run=False)  # admitted: nothing on the server judges the mode

    def full_pod() -> dict[str, Any] | None:
        pods = plane.get(f"/api/v1/namespaces/{NS}/pods")["items"]
        return next((p for p in pods if FULL_CONFIG in helm_chart.container(p["spec"], "vllm")["args"]), None)

    yield wait_for("the controllers to create the edited Deployment's pod", full_pod)


def test_the_hand_edited_deployment_is_admitted_and_makes_its_pod(
    controllers: kube.ControlPlane, edited_pod: dict[str, Any]
) -> None:
    """Deployment -> ReplicaSet -> Pod, all admitted, the refused mode in the pod's vLLM arguments."""
    owner = edited_pod["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet"
    rs = controllers.get(f"/apis/apps/v1/namespaces/{NS}/replicasets/{owner['name']}")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    # The sidecar beside it still expects what the chart judged: it was not edited, and its /readyz compares.
    side = helm_chart.container(edited_pod["spec"], "health")
    assert helm_chart.arg_value(side["args"], "--expected-mode") == "PIECEWISE"
    assert side["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert edited_pod["status"]["phase"] == "Pending" and "nodeName" not in edited_pod["spec"]  # no node here


def _kubelet_reports(plane: kube.ControlPlane, pod: dict[str, Any], ready: bool, ip: str) -> None:
    """What the kubelet writes after running the pod: both containers running, the sidecar's readiness probe
    (/readyz) failing or passing, and the pod's Ready condition from it."""
    status = "True" if ready else "False"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    containers = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "restartCount": 0,
            "started": True,
            "ready": ready or c["name"] == "vllm",
            "state": {"running": {"startedAt": now}},
        }
        for c in pod["spec"]["containers"]
    ]
    body = {
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now,
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": now}
                for t, s in (
                    ("PodScheduled", "True"),
                    ("Initialized", "True"),
                    ("ContainersReady", status),
                    ("Ready", status),
                )
            ],
            "containerStatuses": containers,
        }
    }
    r = plane.client.patch(
        f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}/status",
        json=body,
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert r.status_code == 200, r.text


def _endpoints(plane: kube.ControlPlane, service: str) -> list[dict[str, Any]]:
    slices = plane.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices?labelSelector=kubernetes.io/service-name={service}"
    )["items"]
    return [e for s in slices for e in (s.get("endpoints") or [])]


def test_what_stops_it_serving_is_readiness(controllers: kube.ControlPlane, edited_pod: dict[str, Any]) -> None:
    """Scheduled and running, the edited pod is in the Service's EndpointSlice as not ready (no traffic) for as
    long as the sidecar's /readyz fails; the same pod becomes a serving endpoint only when it passes."""
    plane = controllers
    name = edited_pod["metadata"]["name"]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}
    plane.kubectl("apply", "--server-side", "--field-manager", "test", "-f", "-", stdin=json.dumps(node))
    r = plane.client.post(
        f"/api/v1/namespaces/{NS}/pods/{name}/binding",
        json={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
        },
    )
    assert r.status_code == 201, r.text
    pod = plane.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    service = next(d for d in installed() if d["kind"] == "Service")["metadata"]["name"]

    _kubelet_reports(plane, pod, ready=False, ip="10.244.0.7")
    ep = wait_for(
        "the pod in the EndpointSlice",
        lambda: [e for e in _endpoints(plane, service) if e["addresses"] == ["10.244.0.7"]],
    )
    assert ep[0]["conditions"]["ready"] is False and ep[0]["targetRef"]["name"] == name
    legacy = plane.get(f"/api/v1/namespaces/{NS}/endpoints/{service}")
    assert all("addresses" not in s for s in legacy.get("subsets", [])), legacy  # only notReadyAddresses

    # The control: the same pod, its readiness passing, serves (so the first answer was the readiness, not a setup
    # that never publishes anything).
    _kubelet_reports(plane, pod, ready=True, ip="10.244.0.7")
    wait_for(
        "the endpoint to turn ready", lambda: [e for e in _endpoints(plane, service) if e["conditions"].get("ready")]
    )


# --- what a CEL admission policy would add ------------------------------------------------------------------------

# The natural policy: refuse a Deployment whose containers ask vLLM for a full-graph mode in --compilation-config.
# It has no vLLM release, backend or patch list to judge with: nothing in a Deployment says which vLLM an image holds.
POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "vllm-rocm-cudagraph-mode"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["apps"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["deployments"],
                }
            ]
        },
        "validations": [
            {
                "expression": "!object.spec.template.spec.containers.exists(c, has(c.args) && "
                'c.args.exists(a, a.matches(\'"cudagraph_mode"\\\\s*:\\\\s*"FULL\')))',
                "message": "a full CUDA-graph mode is refused",
            }
        ],
    },
}
BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "vllm-rocm-cudagraph-mode"},
    "spec": {
        "policyName": "vllm-rocm-cudagraph-mode",
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}},
    },
}


@pytest.fixture(scope="module")
def policy(controllers: kube.ControlPlane) -> Iterator[kube.ControlPlane]:
    plane = controllers
    plane.kubectl(
        "apply",
        "--server-side",
        "--field-manager",
        "test",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [POLICY, BINDING]}),
    )
    deployment = next(d for d in installed() if d["kind"] == "Deployment")
    # Policies are loaded asynchronously: wait until the literal edit is refused.
    wait_for(
        "the policy to be enforced",
        lambda: plane.apply([hand_edit(deployment)], NS, check=False).returncode != 0,
        timeout=60,
    )
    yield plane
    plane.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "vllm-rocm-cudagraph-mode")


def _via_env(deployment: dict[str, Any]) -> dict[str, Any]:
    """The same mode through the kubelet's `$(VAR)` expansion, the value from a ConfigMap the policy never sees."""
    edited = hand_edit(deployment, "$(COMPILATION_CONFIG)")
    vllm = helm_chart.container(edited["spec"]["template"]["spec"], "vllm")
    vllm["env"].append(
        {"name": "COMPILATION_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "tuning", "key": "compilation"}}}
    )
    return edited


def test_a_cel_policy_sees_the_text_not_what_runs(policy: kube.ControlPlane) -> None:
    plane = policy
    deployment = next(d for d in installed() if d["kind"] == "Deployment")
    refused = plane.apply([hand_edit(deployment)], NS, check=False)
    assert refused.returncode != 0 and "a full CUDA-graph mode is refused" in refused.stderr, refused.stderr
    # Bypassed: the kubelet expands $(COMPILATION_CONFIG) to {"cudagraph_mode":"FULL"} after admission
    # (tests/charts/test_kubelet_expansion.py expands it the kubelet's way).
    tuning = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "tuning"},
        "data": {"compilation": FULL_CONFIG},
    }
    assert plane.apply([tuning, _via_env(deployment)], NS).returncode == 0
    # And too broad: the chart's own render of a configuration it accepts (FULL_DECODE_ONLY on 0.11.0, fixed
    # upstream; and FULL_AND_PIECEWISE, the mode the README's install example sets, on the chart's default release)
    # is refused, because a Deployment does not say which vLLM release its image holds.
    for values in (
        {"vllm.release": "0.11.0", "compilation.cudagraphMode": "FULL_DECODE_ONLY"},
        {"compilation.cudagraphMode": "FULL_AND_PIECEWISE"},
    ):
        good = next(renders.in_namespace(d, NS) for d in helm_chart.render(values) if d["kind"] == "Deployment")
        proc = plane.apply([good], NS, check=False)
        assert proc.returncode != 0 and "a full CUDA-graph mode is refused" in proc.stderr, (values, proc.stderr)
