"""The sidecar's RBAC is least privilege: the Role the chart grants (templates/rbac.yaml) is exactly the set of
Kubernetes API calls the sidecar's code makes, no more (an unused grant) and no less (a call that would be refused).

The calls are read from the code (every call of a kubernetes API class method anywhere in health/src), and each is
turned into its RBAC verb and resource by calling that very method of the real kubernetes client against a recording
ApiClient, which keeps the HTTP method and path the client would send and sends nothing.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

import kubernetes.client
import pytest

from tests.support.helm_chart import ROOT, kinds, render

SIDECAR_SRC = ROOT / "health" / "src" / "vllm_rocm_health"
# dir() and getattr(), not vars(): the client package loads its API classes lazily.
API_CLASSES = {
    name: getattr(kubernetes.client, name)
    for name in dir(kubernetes.client)
    if name.endswith("Api") and inspect.isclass(getattr(kubernetes.client, name))
}
# RBAC verbs of the HTTP methods (https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb).
VERB = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class _Sent(Exception):
    def __init__(self, method: str, url: str) -> None:
        super().__init__(f"{method} {url}")
        self.method, self.url = method, url


class RecordingApiClient(kubernetes.client.ApiClient):
    """Serializes a request exactly as the real client does, then stops instead of sending it."""

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        raise _Sent(method, url)


def api_calls(sources: dict[str, str]) -> set[tuple[str, str]]:
    """(API class, method) for every call of a kubernetes API method in the given module sources. The API classes
    are the ones the code instantiates (`client.CoreV1Api()`); a method called on any object counts, so a call
    through another name for the api object is still found."""
    trees = {name: ast.parse(src, name) for name, src in sources.items()}
    used: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
                if name in API_CLASSES:
                    used.add(name)
            # Dynamic access would hide a call from this reading: refuse it where the client is imported.
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                if len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
                    src_name = next(n for n, t in trees.items() if t is tree)
                    if "kubernetes" in sources[src_name]:
                        raise AssertionError(f"{src_name}: getattr with a computed name next to the kubernetes client")
    calls: set[tuple[str, str]] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                for cls in used:
                    # An API operation is a method with a `_with_http_info` twin (close() and friends are not).
                    method = node.func.attr.removesuffix("_with_http_info")
                    if callable(getattr(API_CLASSES[cls], f"{method}_with_http_info", None)):
                        calls.add((cls, method))
    return calls


def request_of(cls_name: str, method: str) -> tuple[str, str]:
    """(HTTP method, path) the real client sends for this API method, with placeholder arguments."""
    api = API_CLASSES[cls_name](RecordingApiClient())
    fn = getattr(api, method)
    args: list[Any] = []
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD:
            if p.name != "body":
                args.append(p.name.upper())
            elif inspect.isclass(p.annotation) and hasattr(p.annotation, "model_construct"):
                # A typed body, unvalidated (every field None): only the request line matters here.
                args.append(p.annotation.model_construct(**dict.fromkeys(p.annotation.model_fields)))
            else:
                args.append({})
    try:
        fn(*args)
    except _Sent as sent:
        return sent.method, sent.url.split("?", 1)[0]
    raise AssertionError(f"{cls_name}.{method} sent no request")


def rbac_of(http_method: str, path: str) -> tuple[str, str, str]:
    """(apiGroup, resource[/subresource], verb) that authorizes one request path (built with placeholder names)."""
    if path.startswith("/api/v1/"):
        group, rest = "", path.removeprefix("/api/v1/")
    elif path.startswith("/apis/"):
        group, _version, rest = path.removeprefix("/apis/").split("/", 2)
    else:
        raise AssertionError(f"not a Kubernetes resource path: {path}")
    seg = [s for s in rest.split("/") if s]
    if len(seg) >= 3 and seg[0] == "namespaces":  # a namespaced object, not the namespace itself
        seg = seg[2:]
    resource = seg[0] + (f"/{seg[2]}" if len(seg) > 2 else "")
    named = len(seg) > 1
    if http_method == "GET":
        verb = "get" if named else "list"
    elif http_method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = VERB[http_method]
    return group, resource, verb


def needed(sources: dict[str, str]) -> set[tuple[str, str, str]]:
    return {rbac_of(*request_of(cls, method)) for cls, method in api_calls(sources)}


# `vllm-rocm qualification publish/current`: run by the qualification Job under its own Role, never by the sidecar.
PUBLISH_SRC = SIDECAR_SRC / "qualification_publish.py"


def sidecar_sources() -> dict[str, str]:
    files = sorted(f for f in SIDECAR_SRC.rglob("*.py") if f != PUBLISH_SRC)
    assert files, SIDECAR_SRC
    return {str(f.relative_to(ROOT)): f.read_text() for f in files}


def granted() -> set[tuple[str, str, str]]:
    docs = render()
    assert "ClusterRole" not in kinds(docs) and "ClusterRoleBinding" not in kinds(docs)
    (role,) = kinds(docs)["Role"]
    out = set()
    for rule in role["rules"]:
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    out.add((group, resource, verb))
    return out


def test_role_grants_exactly_the_calls_the_sidecar_makes() -> None:
    calls = api_calls(sidecar_sources())
    # The sidecar follows the vllm container's log and posts Events: a reading that found neither read nothing.
    assert {m for _, m in calls} >= {"read_namespaced_pod_log", "create_namespaced_event"}, calls
    need, grant = needed(sidecar_sources()), granted()
    assert grant == need, f"granted, never used: {sorted(grant - need)}; used, not granted: {sorted(need - grant)}"


def test_only_the_sidecar_gets_credentials() -> None:
    """The Role's subject is the pod's service account, whose token only the sidecar container mounts."""
    docs = render()
    spec = kinds(docs)["Deployment"][0]["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    token_mounts = {
        c["name"] for c in spec["containers"] for m in c.get("volumeMounts", []) if m["name"] == "kube-api-access"
    }
    assert token_mounts == {"health"}
    (binding,) = kinds(docs)["RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": "llm"}]


@pytest.mark.parametrize(
    "source,expected",
    [
        (
            "from kubernetes import client\napi = client.CoreV1Api()\napi.read_namespaced_pod_log('p', 'ns', "
            "follow=True)",
            {("", "pods/log", "get")},
        ),
        (
            "from kubernetes import client\nx = client.CoreV1Api()\ny = x\ny.patch_namespaced_event('e', 'ns', {})\n"
            "y.list_namespaced_pod('ns')\ny.delete_collection_namespaced_pod('ns')",
            {("", "events", "patch"), ("", "pods", "list"), ("", "pods", "deletecollection")},
        ),
        (
            "from kubernetes import client\nclient.CoordinationV1Api().create_namespaced_lease('ns', {})",
            {("coordination.k8s.io", "leases", "create")},
        ),
        (
            "from kubernetes import client\napi = client.CoreV1Api()\napi.read_namespace('ns')",
            {("", "namespaces", "get")},
        ),
    ],
)
def test_the_reading_finds_calls_and_their_rbac(source: str, expected: set[tuple[str, str, str]]) -> None:
    """The reading cannot pass by finding nothing: planted calls come out as the grants they need."""
    assert needed({"planted.py": source}) == expected


def test_a_computed_method_name_is_refused() -> None:
    with pytest.raises(AssertionError, match="getattr"):
        api_calls({"m.py": "from kubernetes import client\napi = client.CoreV1Api()\ngetattr(api, 'read_' + x)()"})


def test_qualification_job_role_grants_exactly_the_calls_publish_makes() -> None:
    """The Job's Role (templates/qualification-job.yaml) against what `qualification publish/current` call; get and
    update only on the one ConfigMap the Job writes (create cannot be limited to a name)."""
    # With the module that makes the API object (the reading counts calls on the classes the code instantiates).
    maker = SIDECAR_SRC / "direct_http.py"
    need = needed({str(f.relative_to(ROOT)): f.read_text() for f in (PUBLISH_SRC, maker)})
    assert need, "found no API call in qualification_publish.py: the reading read nothing"
    values = {"qualification.job.enabled": True, "qualification.gpuProduct": "AMD_Instinct_MI300X_OAM"}
    docs = render(values, reference=False)
    job = kinds(docs)["Job"][0]
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    role = next(r for r in kinds(docs)["Role"] if r["metadata"]["name"] == account)
    name = job["metadata"]["annotations"]["vllm-rocm/qualification-configmap"]
    grant = set()
    for rule in role["rules"]:
        assert rule.get("resourceNames") in (None, [name]), rule
        assert "create" not in rule["verbs"] or "resourceNames" not in rule, rule
        grant |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert grant == need, f"granted, never used: {sorted(grant - need)}; used, not granted: {sorted(need - grant)}"
