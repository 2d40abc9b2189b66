"""When the sidecar lets traffic in. Ready only when everything that must be known is known and right: every
worker loop alive and making progress, the engine up with its graphs captured (or running without graphs),
vLLM answering /health, and a canary pass that is recent. Pure function of one snapshot, so every rule is
testable; the first rule that is not met is the reason."""
from __future__ import annotations

from dataclasses import dataclass, field

from .state import EngineState
from .workers import WorkerStatus

# Bounded reason codes (the `reason` label of vllm_sidecar_not_ready_reason); the message has the details.
REASONS = ("worker_down", "engine_failed", "log_source_down", "capture_pending", "health_unknown",
           "health_failing", "canary_pending", "canary_failing", "canary_stale")


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
        return Verdict(False, "engine_failed", "engine start failed: " + ", ".join(sorted(e.failures)))
    if i.capture_gate and not (e.capture_finished or e.runs_without_graphs):
        if not i.log_source_up:
            return Verdict(False, "log_source_down",
                           f"no vLLM log to read the capture state from: {i.log_source_reason or 'not connected'}")
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
        # `not age <= limit`: an unknown (None) or NaN age is stale too.
        if i.canary_pass_age is None or not i.canary_pass_age <= i.canary_max_age:
            age = "never" if i.canary_pass_age is None else f"{i.canary_pass_age:.0f} s ago"
            return Verdict(False, "canary_stale",
                           f"the last canary pass is too old ({age}; limit {i.canary_max_age:.0f} s): the canary "
                           "is not running or not finishing")
    return Verdict(True, "ok", "ok")
