"""The sidecar's capture, engine and self metrics, read from the state at scrape time (one consistent snapshot)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .known_issues import KnownIssueJudge
from .readiness import REASONS
from .state import LogState
from .workers import WorkerStatus

# Exactly the label values of docs/contracts.md (an unsupported-mode ValueError counts as `exception`).
FAILURE_REASONS = ("oom", "gpu_error", "exception", "engine_failed", "engine_died")
PHASES = ("decode", "mixed", "unspecified")
RUNTIME_MODES = ("FULL", "PIECEWISE")


class SidecarStatus:
    """Shared, lock-protected state: the log state plus what the sidecar knows about itself."""

    def __init__(self, log_state: LogState) -> None:
        self.lock = threading.Lock()
        self.log = log_state
        self.log_lines = 0
        self.log_source_up = False
        self.log_source_reason = "not connected yet"
        self.engine_start_time = 0.0
        self.ready = False
        self.ready_reason = "starting"
        self.ready_code = "starting"
        self.server_healthy: bool | None = None
        self.healthy_since: float | None = None  # monotonic time /health last turned ok (None: not ok now)


class CaptureCollector(Collector):
    def __init__(self, status: SidecarStatus, judge: KnownIssueJudge | None = None) -> None:
        self.status = status
        self.judge = judge if judge is not None else KnownIssueJudge()

    def collect(self) -> Iterator:
        s = self.status
        with s.lock:
            e = s.log.engine
            g = GaugeMetricFamily
            yield g(
                "vllm_cudagraph_capture_finished",
                "1 when the current engine logged `Graph capturing finished` (final pass)",
                value=int(e.capture_finished),
            )
            yield g(
                "vllm_cudagraph_capture_duration_seconds",
                "Capture time of the last finished capture",
                value=e.capture_seconds,
            )
            yield g(
                "vllm_cudagraph_capture_memory_bytes",
                "Memory the last finished capture took",
                value=e.capture_gib * 2**30,
            )
            yield g(
                "vllm_cudagraph_capture_progress_ratio",
                "Progress of the capture bars of the current pass",
                value=e.progress,
            )
            graphs = g(
                "vllm_cudagraph_graphs_captured",
                "CUDA graphs captured in the final pass",
                labels=["phase", "runtime_mode"],
            )
            for phase in PHASES:
                for mode in RUNTIME_MODES:
                    graphs.add_metric([phase, mode], e.graphs.get((phase, mode), 0))
            yield graphs
            info = g(
                "vllm_cudagraph_mode_info",
                "Requested and effective cudagraph_mode of the current engine",
                labels=["requested", "effective"],
            )
            info.add_metric([e.requested, e.effective], 1)
            yield info
            yield g(
                "vllm_cudagraph_mode_downgraded",
                "1 when vLLM changed the requested cudagraph_mode",
                value=int(e.downgraded),
            )
            fails = CounterMetricFamily(
                "vllm_cudagraph_capture_failures", "CUDA-graph capture / engine start failures", labels=["reason"]
            )
            for reason in FAILURE_REASONS:
                fails.add_metric([reason], s.log.failures_total.get(reason, 0))
            yield fails
            yield g(
                "vllm_engine_eager_mode", "1 when the engine runs without CUDA graphs", value=int(e.runs_without_graphs)
            )
            yield CounterMetricFamily(
                "vllm_engine_restarts", "Engine restarts seen after the first start", value=s.log.restarts
            )
            yield CounterMetricFamily(
                "vllm_engine_instances",
                "Engine instances seen (start, restart, new capture, "
                "new engine pid, /health outage): a canary pass counts only on the current one",
                value=s.log.instance,
            )
            yield g(
                "vllm_engine_start_time_seconds",
                "Unix time the current engine instance started",
                value=s.engine_start_time,
            )
            yield g("vllm_sidecar_ready", "What /readyz answers (1 = 200)", value=int(s.ready))
            why = g(
                "vllm_sidecar_not_ready_reason",
                "1 for the rule that keeps /readyz at 503 (the first unmet one; /readyz has the details)",
                labels=["reason"],
            )
            for reason in REASONS:
                why.add_metric([reason], int(not s.ready and s.ready_code == reason))
            yield why
            yield CounterMetricFamily("vllm_sidecar_log_lines", "Log lines read", value=s.log_lines)
            yield g("vllm_sidecar_log_source_up", "1 while the log source is connected", value=int(s.log_source_up))
            yield from self._known_issues(s.log)

    def _known_issues(self, state: LogState) -> Iterator:
        """One series per known issue (0 or 1), so an alert sees a row go active rather than appear."""
        g = GaugeMetricFamily
        arch, source = self.judge.arch(state.image_facts)
        yield _info(
            "vllm_sidecar_gpu_arch_info",
            "The GPU architecture the known issues are judged on, and where it came from (observed: the node's KFD "
            "topology; image: the image's facts line; operator: VLLM_HEALTH_GPU_ARCH; unknown)",
            {"arch": arch or "", "source": source},
        )
        verdict = self.judge.judge(state)  # never raises: a failure is a verdict that is not ok
        yield g(
            "vllm_known_issues_evaluated",
            "1 when the known-issues data was judged against this engine",
            value=int(verdict.ok),
        )
        labels = ["id", "symptom", "verified"]
        active = g(
            "vllm_known_issue_active",
            "1 when a known issue applies to this engine (every condition seen in"
            " its log or deployment) and no applied patch mitigates it",
            labels=labels,
        )
        possible = g(
            "vllm_known_issue_possible",
            "1 when a known issue may apply: no known fact contradicts it, but some condition could not be seen",
            labels=labels,
        )
        by_id = {m.issue.id: m for m in verdict.matches}
        for issue in self.judge.issues:
            m = by_id.get(issue.id)
            lv = [issue.id, issue.symptom, str(issue.verified).lower()]
            active.add_metric(lv, int(m is not None and m.active))
            possible.add_metric(lv, int(m is not None and m.status == "possible" and not m.mitigated))
        yield active
        yield possible


def _info(name: str, doc: str, labels: dict[str, str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), 1)
    return family


class WorkerCollector(Collector):
    """Whether each worker loop of the sidecar is alive and making progress, and how often it was restarted."""

    def __init__(self, statuses: Callable[[], list[WorkerStatus]]) -> None:
        self.statuses = statuses

    def collect(self) -> Iterator:
        up = GaugeMetricFamily(
            "vllm_sidecar_worker_up", "1 while the worker loop is alive and making progress", labels=["worker"]
        )
        restarts = CounterMetricFamily(
            "vllm_sidecar_worker_restarts", "Times the worker loop was restarted after it died", labels=["worker"]
        )
        for w in self.statuses():
            up.add_metric([w.name], int(w.up))
            restarts.add_metric([w.name], w.restarts)
        yield up
        yield restarts


def make_registry(status: SidecarStatus, judge: KnownIssueJudge | None = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CaptureCollector(status, judge))
    return reg
