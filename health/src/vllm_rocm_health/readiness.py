"""When the sidecar lets traffic in: the engine is up with its graphs captured (or runs without graphs), vLLM
answers /health, and the latest canary passed. Pure function, so every rule is testable."""
from __future__ import annotations

from .state import EngineState

# Why the sidecar is (not) ready, as a bounded set of codes: the `reason` label of vllm_sidecar_ready_reason, so a
# dashboard can show per pod why it is out of the Service without parsing /readyz texts.
REASON_CODES = ("ok", "starting", "engine_failed", "capture_not_finished", "health_not_polled", "health_failing",
                "canary_pending", "canary_failed")


class Reason(str):
    """The human reason (what /readyz says) carrying its code; compares and serialises as the plain text."""

    code: str

    def __new__(cls, code: str, text: str) -> Reason:
        if code not in REASON_CODES:
            raise ValueError(f"unknown readiness reason code {code!r}")
        obj = super().__new__(cls, text)
        obj.code = code
        return obj


def reason_code(reason: str) -> str:
    """The code of a reason; the sidecar's initial plain "starting" is `starting`."""
    return getattr(reason, "code", "starting")


def decide(engine: EngineState, server_healthy: bool | None, canary_enabled: bool,
           canary_passing: bool | None, canary_reason: str, capture_gate: bool = True) -> tuple[bool, Reason]:
    """(ready, reason). `capture_gate=False` when no log source is configured: the capture state is then
    unknowable, so readiness rests on /health and the canary alone (documented in health/README.md)."""
    if engine.failures:
        return False, Reason("engine_failed", "engine start failed: " + ", ".join(sorted(engine.failures)))
    if capture_gate and not (engine.capture_finished or engine.runs_without_graphs):
        return False, Reason("capture_not_finished", f"CUDA-graph capture not finished ({engine.progress:.0%})")
    if server_healthy is None:
        return False, Reason("health_not_polled", "vLLM /health not polled yet")
    if not server_healthy:
        return False, Reason("health_failing", "vLLM /health is failing")
    if canary_enabled:
        if canary_passing is None:
            return False, Reason("canary_pending", "waiting for the first canary run")
        if not canary_passing:
            return False, Reason("canary_failed", canary_reason)
    return True, Reason("ok", "ok")
