"""Every value set of the chart's catalogue (tests/support/chart_values.py: the documented configurations and one per
feature the chart tests render), accepted by a real kube-apiserver (issue 21, item 3). The renders are made here, so
`pytest tests/kube` alone and a whole session in any order check the same objects.

`kubectl apply --server-side --dry-run=server --validate=strict`: the API server decodes each object with strict field
validation (an unknown or duplicated field is an error, not a warning), runs defaulting, the admission chain and the
type's validation (for CRDs: the released CRD's OpenAPI schema and its CEL rules), and for an object that exists
compares against it (immutable fields), storing nothing. Offline schema checks (tests/charts/test_chart.py,
kubernetes-validate) see none of admission, CRD CEL rules or immutability."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm_chart, kube, renders
from tests.support.chart_values import CATALOGUE
from tests.support.renders import Objects, Render

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
FRESH, UPGRADE = "llm", "llm-upgrade"  # the chart tests render into namespace llm (helm template -n llm)
# Objects per kubectl call: one call per distinct object would cost ~0.5 s each on this machine.
BATCH = 150
# Kinds the chart renders somewhere among the catalogue's value sets; if one is missing, the check would pass
# without checking it (its CRD or its value set lost).
EXPECTED_KINDS = {
    "Deployment",
    "LeaderWorkerSet",
    "Service",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "PersistentVolumeClaim",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "ScaledObject",
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
    "Pod",
}


@pytest.fixture(scope="module")
def chart_renders() -> list[Render]:
    """The catalogue's value sets (tests/support/chart_values.py), rendered here: the same set in every session."""
    found = renders.catalogue()
    print(f"\n{len(found)} value sets of the catalogue rendered")
    return found


@pytest.fixture(scope="module")
def namespaces(control_plane: kube.ControlPlane, crds: list[str]) -> list[str]:
    for ns in (FRESH, UPGRADE):
        control_plane.create_namespace(ns)
    return [FRESH, UPGRADE]


def apply_all(plane: kube.ControlPlane, docs: list[dict[str, Any]], namespace: str) -> tuple[int, str]:
    """Server-side dry-run apply of `docs` in batches, each into its own namespace (a value set may place an object
    elsewhere, e.g. metrics.grafanaDashboard.namespace), else `namespace`: (objects accepted, the server's errors)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        groups.setdefault(doc.get("metadata", {}).get("namespace") or namespace, []).append(doc)
    accepted, errors = 0, []
    for ns, group in groups.items():
        plane.create_namespace(ns)
        for i in range(0, len(group), BATCH):
            proc = plane.apply(group[i : i + BATCH], ns, check=False)
            accepted += sum(
                1 for line in proc.stdout.splitlines() if line.endswith("serverside-applied (server dry run)")
            )
            if proc.returncode != 0:
                errors.append(proc.stderr.strip())
    return accepted, "\n".join(errors)


def attribute(plane: kube.ControlPlane, found: list[Render], objects: Objects, errors: str, namespace: str) -> str:
    """Which value set of the catalogue each refused object came from: the objects of the refused kind/name, one call
    each (only on failure)."""
    refused = set(re.findall(r"\(\S+/(\S+); \S+, Kind=(\w+)\)", errors))
    lines = []
    for i, doc in enumerate(objects.docs):
        if (doc["metadata"]["name"], doc["kind"]) not in refused:
            continue
        proc = plane.apply([renders.in_namespace(doc, namespace)], namespace, check=False)
        if proc.returncode != 0:
            names = sorted({found[r].name for r in objects.sources[i]})
            lines.append(
                f"{doc['kind']}/{doc['metadata']['name']} from {len(names)} value set(s), e.g. {names[:3]}:\n"
                f"    {proc.stderr.strip()}"
            )
    return "\n".join(lines) or errors


def test_the_catalogue_renders_every_template() -> None:
    """A template that no value set of the catalogue renders would pass the dry runs without being checked."""
    chart = REPO / "charts" / "vllm-rocm"
    every = {str(p.relative_to(chart)) for p in (chart / "templates").rglob("*.yaml")}
    rendered = set().union(*(helm_chart.templates(values) for values in CATALOGUE.values()))
    assert every <= rendered, f"no value set of tests/support/chart_values.py renders {sorted(every - rendered)}"


def test_every_chart_render_is_accepted_by_the_api_server(
    control_plane: kube.ControlPlane, namespaces: list[str], chart_renders: list[Render]
) -> None:
    """A fresh install: every object of every render, hooks (helm test's Pod and its NetworkPolicy) included, into a
    namespace where none of them exists."""
    objects = Objects()
    for n, render in enumerate(chart_renders):
        for doc in render.docs:
            objects.add(doc, n)
    kinds = {d["kind"] for d in objects.docs}
    assert EXPECTED_KINDS <= kinds, f"no render has {EXPECTED_KINDS - kinds}"
    assert any(renders.is_hook(d) and d["kind"] == "NetworkPolicy" for d in objects.docs)
    accepted, errors = apply_all(control_plane, objects.docs, FRESH)
    assert not errors, attribute(control_plane, chart_renders, objects, errors, FRESH)
    assert accepted == len(objects.docs)
    print(f"{accepted} distinct objects of {len(chart_renders)} renders accepted ({len(kinds)} kinds)")


def test_every_chart_render_upgrades_the_default_install(
    control_plane: kube.ControlPlane, namespaces: list[str], chart_renders: list[Render]
) -> None:
    """`helm upgrade` from the default values to each value set: the defaults' objects are stored (for real), then
    each render's objects are dry-run applied over them, so a change to an immutable field (a Deployment's selector,
    a RoleBinding's roleRef, a PVC's spec, a Service's clusterIP) is refused here. Hooks are always created anew."""
    stored = [renders.in_namespace(d, UPGRADE) for d in helm_chart.render({}) if not renders.is_hook(d)]
    control_plane.apply(stored, UPGRADE, dry_run=False)
    objects = Objects()
    for n, render in enumerate(chart_renders):
        for doc in render.docs:
            if not renders.is_hook(doc):
                objects.add(renders.in_namespace(doc, UPGRADE), n)
    accepted, errors = apply_all(control_plane, objects.docs, UPGRADE)
    assert not errors, attribute(control_plane, chart_renders, objects, errors, UPGRADE)
    assert accepted == len(objects.docs)


def test_the_documented_alertmanager_config_is_accepted(
    control_plane: kube.ControlPlane, namespaces: list[str]
) -> None:
    """charts/vllm-rocm/docs/alertmanager-route.yaml, the AlertmanagerConfig the chart README tells users to apply."""
    docs = [d for d in yaml.safe_load_all((REPO / "charts/vllm-rocm/docs/alertmanager-route.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["AlertmanagerConfig"]
    accepted, errors = apply_all(control_plane, docs, FRESH)
    assert not errors and accepted == 1, errors


@functools.cache
def _sample() -> list[dict[str, Any]]:
    """One render with the monitoring objects, one multi-node with KEDA: an object of each kind the mistakes need."""
    return helm_chart.render({"metrics.serviceMonitor.enabled": True}) + helm_chart.render(
        {"multiNode.enabled": True, "multiNode.nodes": 2, "tensorParallelSize": 8, "autoscaling.keda.enabled": True}
    )


def _broken(kind: str, edit: Any) -> list[dict[str, Any]]:
    obj = copy.deepcopy(next(d for d in _sample() if d["kind"] == kind))
    edit(obj)
    return [obj]


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return first


BROKEN = {
    # name: (kind, edit, what the server must say)
    "unknown-field": ("Deployment", lambda o: o["spec"].update(replica=2), r"\.spec\.replica: field not declared"),
    "unknown-container-field": (
        "Deployment",
        lambda o: _container(o).update(readinesProbe={}),
        r"readinesProbe: field not declared",
    ),
    "wrong-type": ("Deployment", lambda o: o["spec"].update(replicas="two"), r"spec\.replicas: expected numeric"),
    "invalid-value": (
        "Service",
        lambda o: o["spec"]["ports"][0].update(port=70000),
        r"spec\.ports\[0\]\.port: Invalid value: 70000",
    ),
    # CRD objects: the released CRD's structural schema (strict decoding) and its OpenAPI validation.
    "crd-unknown-field": (
        "ServiceMonitor",
        lambda o: o["spec"].update(endpoint=[]),
        r"Kind=ServiceMonitor\): \.spec\.endpoint: field not declared in schema",
    ),
    "crd-wrong-type": (
        "LeaderWorkerSet",
        lambda o: o["spec"].update(replicas="two"),
        r"Kind=LeaderWorkerSet\): \.spec\.replicas: expected numeric",
    ),
    "crd-unknown-field-keda": (
        "ScaledObject",
        lambda o: o["spec"].update(maxReplicas=3),
        r"Kind=ScaledObject\): \.spec\.maxReplicas: field not declared in schema",
    ),
    "crd-invalid-value": (
        "ServiceMonitor",
        lambda o: o["spec"]["endpoints"][0].update(interval="30 seconds"),
        r"spec\.endpoints\[0\]\.interval in body should match",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_object_is_refused_by_the_same_path(
    control_plane: kube.ControlPlane, namespaces: list[str], name: str
) -> None:
    """The check cannot pass without checking: a chart object with one deliberate mistake, through apply_all."""
    kind, edit, message = BROKEN[name]
    docs = _broken(kind, edit)
    accepted, errors = apply_all(control_plane, docs, FRESH)
    assert accepted == 0 and re.search(message, errors), errors


def test_an_immutable_field_change_is_refused_on_upgrade(
    control_plane: kube.ControlPlane, namespaces: list[str]
) -> None:
    deployment = renders.in_namespace(next(d for d in helm_chart.render({}) if d["kind"] == "Deployment"), UPGRADE)
    control_plane.apply([deployment], UPGRADE, dry_run=False)  # what the upgrade test stored, idempotent
    changed = copy.deepcopy(deployment)
    changed["spec"]["selector"]["matchLabels"]["extra"] = "x"
    changed["spec"]["template"]["metadata"]["labels"]["extra"] = "x"
    accepted, errors = apply_all(control_plane, [changed], UPGRADE)
    assert accepted == 0 and "field is immutable" in errors, errors
