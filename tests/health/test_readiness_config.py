"""Readiness rules (pure) and the generated configuration: flags beat env vars beat defaults, nested canary fields."""
from __future__ import annotations

import argparse

import pytest
from vllm_rocm_health import config as cfgmod
from vllm_rocm_health.readiness import REASONS, Inputs, decide
from vllm_rocm_health.state import EngineState


def _engine(**kw) -> EngineState:
    e = EngineState()
    for k, v in kw.items():
        setattr(e, k, v)
    return e


@pytest.mark.parametrize(("engine", "healthy", "canary", "ready", "why"), [
    (_engine(), True, (False, None), False, "capture not finished"),
    (_engine(capture_finished=True), True, (False, None), True, "ok"),
    (_engine(eager=True), True, (False, None), True, "ok"),
    (_engine(effective="NONE"), True, (False, None), True, "ok"),
    (_engine(capture_finished=True), None, (False, None), False, "not polled"),
    (_engine(capture_finished=True), False, (False, None), False, "/health is failing"),
    (_engine(capture_finished=True), True, (True, None), False, "first canary"),
    (_engine(capture_finished=True), True, (True, False), False, "score 0.2 < 0.8"),
    (_engine(capture_finished=True), True, (True, True), True, "ok"),
    (_engine(capture_finished=True, failures={"oom"}), True, (False, None), False, "failed: oom"),
])
def test_readiness_rules(engine, healthy, canary, ready, why) -> None:
    v = decide(Inputs(engine, healthy, canary_enabled=canary[0], canary_passing=canary[1],
                      canary_reason="score 0.2 < 0.8", canary_pass_age=1.0, canary_max_age=10.0))
    assert v.ready is ready and why in v.message
    assert v.code == "ok" if ready else v.code in REASONS


def test_without_log_source_capture_is_not_gated() -> None:
    assert decide(Inputs(_engine(), True, capture_gate=False)).ready is True
    assert decide(Inputs(_engine(), False, capture_gate=False)).ready is False


def _parse(argv: list[str], env: dict[str, str]) -> cfgmod.SidecarConfig:
    p = argparse.ArgumentParser()
    cfgmod.add_arguments(p, environ=env)
    return cfgmod.from_args(p.parse_args(argv))


def test_precedence_flag_over_env_over_default() -> None:
    assert _parse([], {}).health_interval == 5.0
    assert _parse([], {"VLLM_HEALTH_HEALTH_INTERVAL": "7"}).health_interval == 7.0
    assert _parse(["--health-interval", "9"], {"VLLM_HEALTH_HEALTH_INTERVAL": "7"}).health_interval == 9.0


def test_nested_canary_fields_get_prefixed_flags_and_env() -> None:
    cfg = _parse(["--canary-interval", "42"], {"VLLM_HEALTH_CANARY_MAX_TOKENS": "3",
                                               "VLLM_HEALTH_CANARY_BASELINE": "/b.json"})
    assert (cfg.canary.interval, cfg.canary.max_tokens, cfg.canary.baseline) == (42.0, 3, "/b.json")
    assert _parse(["--baseline", "/x.json"], {}).canary.baseline == "/x.json"  # contract spelling


def test_bools_and_bad_values() -> None:
    assert _parse(["--no-events"], {"VLLM_HEALTH_EVENTS": "true"}).events is False
    assert _parse([], {"VLLM_HEALTH_EVENTS": "0"}).events is False
    with pytest.raises(SystemExit):
        _parse([], {"VLLM_HEALTH_EVENTS": "maybe"})
    with pytest.raises(ValueError, match="log-source"):
        _parse(["--log-source", "tcp:1"], {})
    with pytest.raises(ValueError, match="canary-interval"):
        _parse(["--canary-interval", "0"], {})
    with pytest.raises(ValueError, match="requested-mode"):
        _parse(["--requested-mode", "TURBO"], {})


def test_every_field_has_help() -> None:
    for name, f, _ in cfgmod._fields(cfgmod.SidecarConfig):
        assert f.metadata.get("help"), name
