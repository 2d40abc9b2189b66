"""Readiness rules (pure) and the generated configuration: flags beat env vars beat defaults, nested canary fields."""

from __future__ import annotations

import argparse

import pytest
from vllm_rocm_core.qualification import FORMAT, KIND, validate
from vllm_rocm_health import config as cfgmod
from vllm_rocm_health.readiness import REASONS, Inputs, decide
from vllm_rocm_health.state import EngineState


def _engine(**kw) -> EngineState:
    e = EngineState()
    for k, v in kw.items():
        setattr(e, k, v)
    return e


@pytest.mark.parametrize(
    ("engine", "healthy", "canary", "ready", "why"),
    [
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
    ],
)
def test_readiness_rules(engine, healthy, canary, ready, why) -> None:
    v = decide(
        Inputs(
            engine,
            healthy,
            canary_enabled=canary[0],
            canary_passing=canary[1],
            canary_reason="score 0.2 < 0.8",
            canary_pass_age=1.0,
            canary_max_age=10.0,
            instance=3,
            canary_pass_instance=3,
            engine_seen=True,
        )
    )
    assert v.ready is ready and why in v.message
    assert v.code == "ok" if ready else v.code in REASONS


def test_without_log_source_capture_is_not_gated() -> None:
    assert decide(Inputs(_engine(), True, capture_gate=False)).ready is True
    assert decide(Inputs(_engine(), False, capture_gate=False)).ready is False


def _ready_inputs(**kw) -> Inputs:
    """Everything right: captured engine seen, /health ok, a fresh canary pass on the current instance."""
    args = dict(
        engine=_engine(
            capture_finished=True,
            config_mode="FULL_AND_PIECEWISE",
            effective="FULL_AND_PIECEWISE",
            requested="FULL_AND_PIECEWISE",
        ),
        server_healthy=True,
        canary_enabled=True,
        canary_passing=True,
        canary_pass_age=1.0,
        canary_max_age=10.0,
        engine_seen=True,
        instance=2,
        canary_pass_instance=2,
        expected_mode="FULL_AND_PIECEWISE",
    )
    args.update(kw)
    return Inputs(**args)


def test_runtime_authority_rules() -> None:
    assert decide(_ready_inputs()).ready
    # a pass measured on an earlier engine instance (restart, new capture, /health outage) does not count
    v = decide(_ready_inputs(instance=3, instance_reason="a new engine started"))
    assert (v.ready, v.code) == (False, "canary_pending") and "a new engine started" in v.message
    # the mode vLLM's engine line shows is not the one the deployment asked for
    e = _engine(capture_finished=True, config_mode="FULL", effective="FULL")
    v = decide(_ready_inputs(engine=e))
    assert (v.ready, v.code) == (False, "mode_mismatch") and "FULL_AND_PIECEWISE" in v.message
    v = decide(_ready_inputs(engine=_engine(capture_finished=True)))  # config line without a readable mode
    assert (v.ready, v.code) == (False, "mode_unknown")
    assert decide(_ready_inputs(engine=e, expected_mode="")).ready  # nothing asked for: nothing to compare
    # a downgrade vLLM logs is no mismatch, unless the qualification failed the mode it runs
    down = _engine(capture_finished=True, config_mode="FULL_AND_PIECEWISE", effective="PIECEWISE")
    assert decide(_ready_inputs(engine=down)).ready
    v = decide(_ready_inputs(engine=down, failed_modes=frozenset({"PIECEWISE"})))
    assert (v.ready, v.code) == (False, "mode_failed_qualification")
    # running a mode the report failed is named before a mismatch: it is known wrong on this node
    eager = _engine(capture_finished=True, config_mode="NONE", effective="NONE")
    v = decide(_ready_inputs(engine=eager, failed_modes=frozenset({"NONE"})))
    assert (v.ready, v.code) == (False, "mode_failed_qualification") and "NONE" in v.message
    # a qualification report belongs to the release it measured: another one, or one not known yet, is refused
    rep = validate(
        {
            "kind": KIND,
            "format": FORMAT,
            "vllm_version": "0.26.0",
            "served_model_name": "m",
            "rows": [{"mode": "FULL_AND_PIECEWISE", "verdict": "pass"}],
        }
    )
    assert decide(
        _ready_inputs(
            engine=_engine(
                capture_finished=True,
                config_mode="FULL_AND_PIECEWISE",
                effective="FULL_AND_PIECEWISE",
                version="0.26.0",
            ),
            qualification=rep,
        )
    ).ready
    for version, words in (("0.26.1", "measured on vLLM 0.26.0, vLLM 0.26.1 runs"), ("", "not known yet")):
        e = _engine(
            capture_finished=True, config_mode="FULL_AND_PIECEWISE", effective="FULL_AND_PIECEWISE", version=version
        )
        v = decide(_ready_inputs(engine=e, qualification=rep))
        assert (v.ready, v.code) == (False, "release_not_qualified") and words in v.message
    v = decide(_ready_inputs(blocking_issues=("aiter-fa-full-cudagraph-always: FULL is wrong",)))
    assert (v.ready, v.code) == (False, "known_issue") and "aiter-fa-full-cudagraph-always" in v.message
    v = decide(_ready_inputs(known_issues_error="version '0.1.2x' is not a PEP 440 version"))
    assert (v.ready, v.code) == (False, "known_issues_unknown")
    assert {v.code for v in [decide(_ready_inputs())]} == {"ok"}


def test_a_log_source_means_the_engine_line_is_required() -> None:
    """With a log source, Ready needs vLLM's own engine config line: capture lines alone (another rank's, a logging
    configuration that hides the config line) vouch for nothing. Pending until vLLM has answered /health for the
    grace, then named."""
    captured = _engine(capture_finished=True, effective="FULL_AND_PIECEWISE")
    for healthy_for in (None, 0.0, 59.9):
        v = decide(_ready_inputs(engine=captured, engine_seen=False, healthy_for=healthy_for, log_grace=60.0))
        assert (v.ready, v.code) == (False, "capture_pending") and "engine config line" in v.message
    v = decide(_ready_inputs(engine=captured, engine_seen=False, healthy_for=60.5, log_grace=60.0))
    assert (v.ready, v.code) == (False, "engine_config_unseen") and "VLLM_LOGGING_CONFIG_PATH" in v.message
    v = decide(_ready_inputs(engine=captured, engine_seen=False, healthy_for=float("nan")))
    assert (v.ready, v.code) == (False, "capture_pending")  # an unknown time is no overdue log, but still not ready
    # Without a log source there is nothing to require (documented: readiness rests on /health and the canary).
    assert decide(_ready_inputs(engine=captured, engine_seen=False, capture_gate=False, expected_mode="")).ready


def test_an_unreadable_engine_line_gives_no_facts() -> None:
    e = _engine(capture_finished=True, config_mode="unknown", config_error="key 'kv_cache_dtype' twice")
    for expected in ("FULL_AND_PIECEWISE", ""):
        v = decide(_ready_inputs(engine=e, expected_mode=expected))
        assert (v.ready, v.code) == (False, "engine_config_unreadable") and "twice" in v.message


def test_capture_lines_the_sidecar_does_not_know_are_named_after_the_grace() -> None:
    e = _engine(config_mode="FULL_AND_PIECEWISE", effective="FULL_AND_PIECEWISE", version="0.99.0")
    v = decide(_ready_inputs(engine=e, healthy_for=10.0, log_grace=60.0))
    assert (v.ready, v.code) == (False, "capture_pending")
    v = decide(_ready_inputs(engine=e, healthy_for=61.0, log_grace=60.0))
    assert (v.ready, v.code) == (False, "log_format_unknown") and "0.99.0" in v.message
    # /health not answering: the capture may really still run, so it stays pending
    assert decide(_ready_inputs(engine=e, healthy_for=None)).code == "capture_pending"
    # a mode without graphs needs no capture line
    eager = _engine(config_mode="NONE", effective="NONE", requested="NONE", eager=True)
    assert decide(_ready_inputs(engine=eager, expected_mode="NONE", healthy_for=600.0)).ready


def test_qualified_means_passed() -> None:
    """A report that passed only some modes: vLLM's own fallback to a mode it never measured is not Ready."""
    fallback = _engine(
        capture_finished=True, config_mode="FULL_AND_PIECEWISE", requested="FULL_AND_PIECEWISE", effective="PIECEWISE"
    )
    passed = frozenset({"NONE", "FULL_AND_PIECEWISE"})
    v = decide(_ready_inputs(engine=fallback, passed_modes=passed))
    assert (v.ready, v.code) == (False, "mode_not_qualified")
    assert "PIECEWISE" in v.message and "FULL_AND_PIECEWISE" in v.message and "NONE" in v.message
    assert decide(_ready_inputs(passed_modes=passed)).ready  # the mode it passed
    v = decide(_ready_inputs(passed_modes=frozenset()))  # a report that passed nothing
    assert (v.ready, v.code) == (False, "mode_not_qualified") and "passed: none" in v.message


def test_a_report_of_another_gpu_product_is_not_ready_with_or_without_a_log() -> None:
    """--gpu-product against the report's gpu_product (Report.check_gpu_product): another product, or a product on
    one side only, is gpu_product_not_qualified, named before anything that waits on the engine (it is a fact of
    the deployment, and a log source is not needed to judge it). Neither side naming one: as before."""
    raw = {
        "kind": KIND,
        "format": FORMAT,
        "vllm_version": "0.26.0",
        "served_model_name": "m",
        "rows": [{"mode": "FULL_AND_PIECEWISE", "verdict": "pass"}],
    }
    running = _engine(
        capture_finished=True, config_mode="FULL_AND_PIECEWISE", effective="FULL_AND_PIECEWISE", version="0.26.0"
    )
    mi300x = validate({**raw, "gpu_product": "AMD_Instinct_MI300X_OAM"})
    assert decide(_ready_inputs(engine=running, qualification=mi300x, gpu_product="AMD_Instinct_MI300X_OAM")).ready
    assert decide(_ready_inputs(engine=running, qualification=validate(raw))).ready  # neither names one
    for report, product, words in (
        (mi300x, "AMD_Instinct_MI355X_OAM", "qualified GPU product AMD_Instinct_MI300X_OAM, this deployment runs on"),
        (mi300x, "", "this deployment's product is not known: give --gpu-product"),
        (validate(raw), "AMD_Instinct_MI300X_OAM", "does not say which GPU product it measured"),
    ):
        for inputs in (
            _ready_inputs(engine=running, qualification=report, gpu_product=product),
            _ready_inputs(engine=_engine(), engine_seen=False, qualification=report, gpu_product=product),
            Inputs(_engine(), True, capture_gate=False, qualification=report, gpu_product=product),
        ):
            v = decide(inputs)
            assert (v.ready, v.code) == (False, "gpu_product_not_qualified") and words in v.message, v
    assert REASONS["gpu_product_not_qualified"] == REASONS["release_not_qualified"]  # critical after 5m


def test_the_gpu_product_flag_and_variable() -> None:
    assert _parse([], {}).gpu_product == ""
    env = {"VLLM_HEALTH_GPU_PRODUCT": "AMD_Instinct_MI300X_OAM"}
    assert _parse([], env).gpu_product == "AMD_Instinct_MI300X_OAM"
    assert _parse(["--gpu-product", "AMD_Instinct_MI355X_OAM"], env).gpu_product == "AMD_Instinct_MI355X_OAM"
    with pytest.raises(ValueError, match="--gpu-product 'AMD Instinct MI300X': not a GPU product name"):
        _parse(["--gpu-product", "AMD Instinct MI300X"], {})


def _parse(argv: list[str], env: dict[str, str], canary: bool = False) -> cfgmod.SidecarConfig:
    """Parsed and validated; without `canary`, the explicit opt-out is added (the tests here are about other
    settings; the accuracy-reference rule has its own test)."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    cfgmod.add_arguments(p, environ=env)
    extra = [] if canary or "--no-canary-enabled" in argv else ["--no-canary-enabled"]
    return cfgmod.from_args(p.parse_args(argv + extra))


def test_an_accuracy_reference_is_required_or_explicitly_refused(tmp_path) -> None:
    with pytest.raises(
        ValueError, match="no accuracy reference.*--canary-baseline.*--qualification.*--no-canary-enabled"
    ):
        _parse([], {}, canary=True)
    assert _parse(["--canary-baseline", "/b.json"], {}, canary=True).canary.enabled
    assert _parse([], {"VLLM_HEALTH_CANARY_ENABLED": "false"}, canary=True).canary.enabled is False
    with pytest.raises(ValueError, match="say one or the other"):
        _parse(["--no-canary-enabled", "--canary-baseline", "/b.json"], {})
    report = tmp_path / "report.json"
    report.write_text("{}")
    assert _parse(["--qualification", str(report)], {}, canary=True).qualification == str(report)
    with pytest.raises(ValueError, match="no such file"):
        _parse(["--qualification", str(tmp_path / "nope.json")], {}, canary=True)


def test_precedence_flag_over_env_over_default() -> None:
    assert _parse([], {}).health_interval == 5.0
    assert _parse([], {"VLLM_HEALTH_HEALTH_INTERVAL": "7"}).health_interval == 7.0
    assert _parse(["--health-interval", "9"], {"VLLM_HEALTH_HEALTH_INTERVAL": "7"}).health_interval == 9.0


def test_nested_canary_fields_get_prefixed_flags_and_env() -> None:
    cfg = _parse(
        ["--canary-interval", "42"],
        {"VLLM_HEALTH_CANARY_MAX_TOKENS": "3", "VLLM_HEALTH_CANARY_BASELINE": "/b.json"},
        canary=True,
    )
    assert (cfg.canary.interval, cfg.canary.max_tokens, cfg.canary.baseline) == (42.0, 3, "/b.json")
    assert _parse(["--baseline", "/x.json"], {}, canary=True).canary.baseline == "/x.json"  # contract spelling


def test_bools_and_bad_values() -> None:
    assert _parse(["--no-events"], {"VLLM_HEALTH_EVENTS": "true"}).events is False
    assert _parse([], {"VLLM_HEALTH_EVENTS": "0"}).events is False
    with pytest.raises(SystemExit):
        _parse([], {"VLLM_HEALTH_EVENTS": "maybe"})
    with pytest.raises(ValueError, match="log-source"):
        _parse(["--log-source", "tcp:1"], {})
    with pytest.raises(ValueError, match="canary-interval"):
        _parse(["--canary-interval", "0"], {})
    with pytest.raises(ValueError, match="expected-mode"):
        _parse(["--requested-mode", "TURBO"], {})  # the old spelling, same check
    with pytest.raises(ValueError, match="expected-mode needs a log source"):
        _parse(["--expected-mode", "FULL"], {})
    with pytest.raises(ValueError, match="not a known-issue id"):
        _parse(["--allow-known-issues", "ok-id,Bad Id"], {})


def test_every_field_has_help() -> None:
    for name, f, _ in cfgmod._fields(cfgmod.SidecarConfig):
        assert f.metadata.get("help"), name


def test_every_readiness_reason_has_a_runbook_entry() -> None:
    from pathlib import Path

    runbook = (Path(__file__).resolve().parents[2] / "charts" / "vllm-rocm" / "docs" / "runbook.md").read_text()
    missing = [r for r in REASONS if f"`{r}`" not in runbook]
    assert not missing, f"readiness reasons without a runbook entry: {missing}"
