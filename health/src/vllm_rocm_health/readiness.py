"""When the sidecar lets traffic in: the engine is up with its graphs captured (or runs without graphs), vLLM
answers /health, and the latest canary passed. Pure function, so every rule is testable."""
from __future__ import annotations

from .state import EngineState


def decide(engine: EngineState, server_healthy: bool | None, canary_enabled: bool,
           canary_passing: bool | None, canary_reason: str, capture_gate: bool = True) -> tuple[bool, str]:
    """(ready, reason). `capture_gate=False` when no log source is configured: the capture state is then
    unknowable, so readiness rests on /health and the canary alone (documented in health/README.md)."""
    if engine.failures:
        return False, "engine start failed: " + ", ".join(sorted(engine.failures))
    if capture_gate and not (engine.capture_finished or engine.runs_without_graphs):
        return False, f"CUDA-graph capture not finished ({engine.progress:.0%})"
    if server_healthy is None:
        return False, "vLLM /health not polled yet"
    if not server_healthy:
        return False, "vLLM /health is failing"
    if canary_enabled:
        if canary_passing is None:
            return False, "waiting for the first canary run"
        if not canary_passing:
            return False, canary_reason
    return True, "ok"
