"""When the sidecar lets traffic in. Ready only when everything that must be known is known and right: every
worker loop alive and making progress; the engine that runs is the one the deployment asked for (its cudagraph
mode, no unmitigated verified known issue, no mode the qualification failed, the release and GPU product it
measured), up with its graphs captured (or running without graphs); vLLM answering /health; and a recent canary pass
measured on this very engine instance.
Pure function of one snapshot, so every rule is testable; the first rule that is not met is the reason."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_rocm_core.qualification import QualificationError, Report
from vllm_rocm_known_issues.evaluator import MODES

from .state import EngineState
from .workers import WorkerStatus

CRITICAL, WARNING = "critical", "warning"


@dataclass(frozen=True)
class HeldOut:
    """The alert on a pod held out of the Service by one reason (VllmPodHeldOut): it fires once the pod has not been
    Ready for `hold` (a Prometheus duration) and this is the reason now, with this `severity`."""

    severity: str  # CRITICAL or WARNING
    hold: str


# The bounded reason codes (the `reason` label of vllm_sidecar_not_ready_reason; /readyz's message has the details),
# each with its alert. The alert rules and the runbook's table are generated from this (`make generate`). Critical
# after 5-10 min: what does not clear by itself and needs a person (the engine is not what the deployment asked for
# or cannot be checked, answers are wrong, the engine cannot start). Warning after longer: what normally clears by
# itself (a start, a restart, the canary's next run, a back-off), so only a hold well past a slow cold start is news.
# A new reason: one line here, a `### `reason`` section in charts/vllm-rocm/docs/runbook.md, then `make generate`.
REASONS: dict[str, HeldOut] = {
    "worker_down": HeldOut(WARNING, "15m"),
    "engine_failed": HeldOut(CRITICAL, "10m"),
    "engine_config_unreadable": HeldOut(CRITICAL, "5m"),
    "engine_config_unseen": HeldOut(CRITICAL, "5m"),
    "known_issues_unknown": HeldOut(CRITICAL, "5m"),
    "known_issue": HeldOut(CRITICAL, "5m"),
    "gpu_arch_unknown": HeldOut(CRITICAL, "5m"),
    "mode_unknown": HeldOut(CRITICAL, "5m"),
    "mode_mismatch": HeldOut(CRITICAL, "5m"),
    "mode_failed_qualification": HeldOut(CRITICAL, "5m"),
    "mode_not_qualified": HeldOut(CRITICAL, "5m"),
    "release_not_qualified": HeldOut(CRITICAL, "5m"),
    "gpu_product_not_qualified": HeldOut(CRITICAL, "5m"),
    "log_source_down": HeldOut(WARNING, "15m"),
    "log_format_unknown": HeldOut(CRITICAL, "5m"),
    "capture_pending": HeldOut(WARNING, "45m"),
    "health_unknown": HeldOut(WARNING, "15m"),
    "health_failing": HeldOut(WARNING, "15m"),
    "canary_pending": HeldOut(WARNING, "45m"),
    "canary_failing": HeldOut(CRITICAL, "10m"),
    "canary_stale": HeldOut(WARNING, "20m"),
}


@dataclass
class Inputs:
    engine: EngineState
    server_healthy: bool | None
    # False when no log source is configured: the capture state is then unknowable, so readiness rests on
    # /health and the canary alone (documented in health/README.md).
    capture_gate: bool = True
    log_source_up: bool = True
    log_source_reason: str = ""
    workers: list[WorkerStatus] = field(default_factory=list)
    canary_enabled: bool = False
    canary_passing: bool | None = None
    canary_reason: str = ""
    canary_pass_age: float | None = None  # seconds since the last pass ended; None = never passed
    canary_max_age: float = float("inf")
    # Runtime authority: what vLLM's own log says it runs, against what the deployment asked for.
    engine_seen: bool = False  # vLLM's engine config line of the current engine was read
    instance: int = 0  # the current engine instance (LogState.instance)
    instance_reason: str = ""
    canary_pass_instance: int | None = None  # the instance the last canary pass was measured on
    expected_mode: str = ""  # "" = the deployment did not say
    failed_modes: frozenset[str] = frozenset()  # modes the qualification report failed
    passed_modes: frozenset[str] | None = None  # modes the qualification report passed (None: no report)
    # How long vLLM has answered /health for this engine instance (None: not answering). Once it answers, its
    # engine config line and capture lines have been written: past `log_grace` seconds without them, the log
    # is one this sidecar cannot read (a logging configuration, a format it does not know), said as such.
    healthy_for: float | None = None
    log_grace: float = 60.0
    qualification: Report | None = None  # the deployment's qualification report, when it has one
    gpu_product: str = ""  # the GPU product this pod runs on (--gpu-product); "" = not said
    known_issues_error: str = ""  # the known issues could not be judged for this engine
    blocking_issues: tuple[str, ...] = ()  # "id: title" of each verified, active, unmitigated, not allowed row
    # Rows of that kind that only the unknown GPU architecture leaves open, and what was seen of the GPU.
    arch_undecided: tuple[str, ...] = ()
    gpu_detail: str = ""


@dataclass(frozen=True)
class Verdict:
    ready: bool
    code: str  # "ok" or one of REASONS
    message: str


def decide(i: Inputs) -> Verdict:
    for w in i.workers:
        if not w.up:
            return Verdict(False, "worker_down", w.reason)
    e = i.engine
    if e.failures:
        what = "the engine died under the running server" if e.failures == {"engine_died"} else "engine start failed"
        return Verdict(False, "engine_failed", f"{what}: " + ", ".join(sorted(e.failures)))
    if i.qualification is not None:
        # A fact of the deployment, not of the log: judged with or without a log source, before anything waits on
        # the engine (a report of another GPU product stays wrong however long the engine takes to start).
        try:
            i.qualification.check_gpu_product(i.gpu_product)
        except QualificationError as exc:
            return Verdict(False, "gpu_product_not_qualified", str(exc))
    # `not healthy_for <= grace`-style: an unknown (None) time has not passed the grace.
    log_overdue = i.healthy_for is not None and i.healthy_for > i.log_grace
    if i.capture_gate:
        # A log source is configured: what runs is checked from vLLM's own lines, and nothing else vouches for it.
        if not i.engine_seen:
            if not i.log_source_up:
                return _log_source_down(i)
            if log_overdue:
                return Verdict(
                    False,
                    "engine_config_unseen",
                    f"vLLM has answered /health for {i.healthy_for:.0f} s but its log shows no engine config line "
                    "(`Initializing a V1 LLM engine ... with config:`), so the mode, release and known issues of "
                    "what runs cannot be checked: a logging configuration (VLLM_LOGGING_CONFIG_PATH, "
                    "VLLM_LOGGING_LEVEL above INFO, VLLM_LOGGING_PREFIX, VLLM_CONFIGURE_LOGGING=0), a "
                    "data-parallel rank that does not print it, or a log this sidecar does not follow from its "
                    "start",
                )
            return Verdict(False, "capture_pending", "waiting for vLLM's engine config line")
        if e.config_error:
            return Verdict(
                False,
                "engine_config_unreadable",
                f"vLLM's engine config line does not read as vLLM {e.version or '(no version)'} prints it "
                f"({e.config_error}): no facts are taken from it",
            )
        v = _authority(i)
        if v is not None:
            return v
        if not (e.capture_finished or e.runs_without_graphs):
            if not i.log_source_up:
                return _log_source_down(i)
            if log_overdue:
                return Verdict(
                    False,
                    "log_format_unknown",
                    f"vLLM {e.version} has answered /health for {i.healthy_for:.0f} s, but its log shows no "
                    f"CUDA-graph capture line this sidecar knows for cudagraph_mode {e.effective}: the log format "
                    "of this release (or its logging configuration) is not recognized",
                )
            return Verdict(False, "capture_pending", f"CUDA-graph capture not finished ({e.progress:.0%})")
    if i.server_healthy is None:
        return Verdict(False, "health_unknown", "vLLM /health not polled yet")
    if not i.server_healthy:
        return Verdict(False, "health_failing", "vLLM /health is failing")
    if i.canary_enabled:
        if i.canary_passing is None:
            return Verdict(False, "canary_pending", "waiting for the first canary run")
        if not i.canary_passing:
            return Verdict(False, "canary_failing", i.canary_reason)
        if i.canary_pass_instance != i.instance:
            return Verdict(
                False,
                "canary_pending",
                "the canary has not passed on this engine instance yet "
                f"({i.instance_reason or 'new instance'}); a run is due now",
            )
        # `not age <= limit`: an unknown (None) or NaN age is stale too.
        if i.canary_pass_age is None or not i.canary_pass_age <= i.canary_max_age:
            age = "never" if i.canary_pass_age is None else f"{i.canary_pass_age:.0f} s ago"
            return Verdict(
                False,
                "canary_stale",
                f"the last canary pass is too old ({age}; limit {i.canary_max_age:.0f} s): the canary "
                "is not running or not finishing",
            )
    return Verdict(True, "ok", "ok")


def _log_source_down(i: Inputs) -> Verdict:
    return Verdict(
        False,
        "log_source_down",
        f"no vLLM log to read the capture state from: {i.log_source_reason or 'not connected'}",
    )


def _authority(i: Inputs) -> Verdict | None:
    """The rules on what runs, from vLLM's own lines (never from what the deployment says it rendered)."""
    e = i.engine
    if i.known_issues_error:
        return Verdict(False, "known_issues_unknown", f"known issues cannot be judged: {i.known_issues_error}")
    if i.blocking_issues:
        return Verdict(
            False,
            "known_issue",
            "a verified known issue applies to what vLLM runs and no applied patch "
            "mitigates it: " + "; ".join(i.blocking_issues) + " (allow it explicitly only after reading "
            "the runbook)",
        )
    if i.arch_undecided:
        return Verdict(
            False,
            "gpu_arch_unknown",
            "the GPU architecture is not known (" + (i.gpu_detail or "not observed") + "; no arch in the image's "
            "facts line; VLLM_HEALTH_GPU_ARCH / rocm.gpuArch not set) and a verified known issue applies to what vLLM "
            "runs on some architectures: " + "; ".join(i.arch_undecided) + " (name the architecture, or allow the "
            "issue after reading the runbook)",
        )
    # Running a mode the report failed is the stronger evidence (known wrong on this node): named before a mismatch.
    if e.effective in i.failed_modes:
        return Verdict(
            False,
            "mode_failed_qualification",
            f"vLLM runs cudagraph_mode {e.effective} (asked for "
            f"{e.requested}), which the qualification report failed on this node",
        )
    if i.expected_mode:
        if e.config_mode not in MODES:
            return Verdict(
                False,
                "mode_unknown",
                f"vLLM's engine config line shows no cudagraph_mode to check against the expected {i.expected_mode}",
            )
        if e.config_mode != i.expected_mode:
            return Verdict(
                False,
                "mode_mismatch",
                f"vLLM runs cudagraph_mode {e.config_mode}, the deployment asked "
                f"for {i.expected_mode} (a wrapper, an env var or a config file changed it)",
            )
    if i.passed_modes is not None and e.effective not in i.passed_modes:
        # vLLM's own fallback (a backend without full-graph support resolves FULL to FULL_AND_PIECEWISE, ...) can run
        # a mode the report never measured: qualified means passed, not "not failed".
        passed = ", ".join(sorted(i.passed_modes)) or "none"
        return Verdict(
            False,
            "mode_not_qualified",
            f"vLLM runs cudagraph_mode {e.effective} (asked for {e.requested}), a mode the qualification report did "
            f"not pass on this node (it passed: {passed})",
        )
    if i.qualification is not None:
        try:
            i.qualification.check_release(e.version)
        except QualificationError as exc:
            return Verdict(False, "release_not_qualified", str(exc))
    return None
