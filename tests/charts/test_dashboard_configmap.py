"""The Grafana dashboard ConfigMap: off by default, the checked-in JSON byte for byte, the sidecar's label."""

from __future__ import annotations

import json

from tests.support.helm_chart import CHART, kinds, render, render_error

DASHBOARD = CHART / "files" / "dashboards" / "vllm-rocm.json"


def _configmaps(values: dict) -> list[dict]:
    return [d for d in kinds(render(values)).get("ConfigMap", []) if d["metadata"]["name"].endswith("-dashboard")]


def test_off_by_default() -> None:
    assert _configmaps({}) == []


def test_ships_the_generated_json_with_the_sidecar_label() -> None:
    [cm] = _configmaps({"metrics.grafanaDashboard.enabled": True})
    assert cm["metadata"]["namespace"] == "llm"
    # kube-prometheus-stack's Grafana sidecar defaults: label grafana_dashboard, value "1"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"
    assert cm["data"]["vllm-rocm.json"] == DASHBOARD.read_text().rstrip("\n")
    assert json.loads(cm["data"]["vllm-rocm.json"])["uid"] == "vllm-rocm"


def test_label_namespace_and_annotations_are_values() -> None:
    [cm] = _configmaps(
        {
            "metrics.grafanaDashboard.enabled": True,
            "metrics.grafanaDashboard.namespace": "monitoring",
            "metrics.grafanaDashboard.label": "grafana.example.com/dashboard",
            "metrics.grafanaDashboard.labelValue": 1,
            "metrics.grafanaDashboard.labels": {"team": "llm"},
            "metrics.grafanaDashboard.annotations": {"grafana_folder": "vLLM"},
        }
    )
    meta = cm["metadata"]
    assert meta["namespace"] == "monitoring"
    assert meta["labels"]["grafana.example.com/dashboard"] == "1" and "grafana_dashboard" not in meta["labels"]
    assert meta["labels"]["team"] == "llm" and meta["annotations"] == {"grafana_folder": "vLLM"}


def test_schema_refuses_bad_values() -> None:
    assert "labelValue" in render_error(
        {"metrics.grafanaDashboard.enabled": True, "metrics.grafanaDashboard.labelValue": "not a label value"}
    )
    assert "namespace" in render_error({"metrics.grafanaDashboard.namespace": "Not_A_Namespace"})
    assert "grafanaDashboard" in render_error({"metrics.grafanaDashboard.enable": True})  # a typo is an error
