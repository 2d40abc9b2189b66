"""Canary pieces that need no server: problems, scoring, fingerprint comparison, baselines, load bounds."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner, fingerprint, problems
from vllm_rocm_health.canary.baseline import Baseline, BaselineError
from vllm_rocm_health.canary.runner import budget

from tests.support.canary import make_baseline


def test_problems_are_seeded_and_exact() -> None:
    a, b = problems.generate(7, 20), problems.generate(7, 20)
    assert a == b
    assert a != problems.generate(8, 20)
    for p in a:
        x, y = (int(t) for t in p.question.split() if t.isdigit())
        assert p.answer == x + y
        assert p.prompt.endswith(f"\n{p.question} =")


@pytest.mark.parametrize("text,expected", [(" 12", 12), (" 7 apples", 7), ("-3", -3), (" none", None), ("", None)])
def test_parse_answer(text: str, expected: int | None) -> None:
    assert problems.parse_answer(text) == expected


def test_score_counts_exact_matches() -> None:
    ps = problems.generate(1, 4)
    assert problems.score(ps, [p.answer for p in ps]) == 1.0
    assert problems.score(ps, [ps[0].answer, None, ps[2].answer + 1, ps[3].answer]) == 0.5


def test_fingerprint_drift() -> None:
    base = [[None, -1.0, -2.0], [None, -0.5]]
    assert fingerprint.drift(base, base) == 0.0
    assert fingerprint.drift(base, [[None, -1.1, -2.0], [None, -0.2]]) == pytest.approx(0.3)
    assert math.isinf(fingerprint.drift(base, [[None, -1.0], [None, -0.5]]))  # token count changed
    assert math.isinf(fingerprint.drift(base, base[:1]))


def _baseline(**kw) -> Baseline:
    return make_baseline(**{"seed": 1, "num_problems": 2, **kw})


def test_baseline_round_trip_and_validation(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _baseline().save(path)
    loaded = Baseline.load(path)
    assert loaded.answers == [p.answer for p in problems.generate(1, 2)]
    loaded.check_matches("m", 1, 2)
    with pytest.raises(BaselineError, match="model 'other' != baseline's 'm'"):
        loaded.check_matches("other", 1, 2)
    with pytest.raises(BaselineError, match="seed 2 != baseline's 1"):
        loaded.check_matches("m", 2, 2)


def test_baseline_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="not found: record one"):
        Baseline.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BaselineError, match="unreadable"):
        Baseline.load(bad)
    _baseline(answers=[1], score=0.0).save(bad)
    with pytest.raises(BaselineError, match="1 answers for 2 problems"):
        Baseline.load(bad)


def test_budget_bounds_requests() -> None:
    n_fp = len(fingerprint.REFERENCE_TEXTS)
    assert budget(CanaryConfig(num_problems=12, long_prompts=2, max_requests=24)) == (12, 2, 2)
    # The baseline's problems first, then the long prompts (both must match the baseline), then the fresh problems,
    # which leave room for the /v1/models request.
    assert budget(CanaryConfig(num_problems=12, long_prompts=2, max_requests=n_fp + 16)) == (12, 2, 1)
    assert budget(CanaryConfig(num_problems=12, long_prompts=2, max_requests=n_fp + 15)) == (12, 2, 0)
    assert budget(CanaryConfig(num_problems=12, long_prompts=2, max_requests=n_fp + 5)) == (5, 0, 0)
    assert budget(CanaryConfig(num_problems=12, long_prompts=2, max_requests=1)) == (0, 0, 0)
    # The defaults fit: 8 + 2 long + 2 fresh + 3 fingerprint texts + /v1/models = 16 requests.
    assert budget(CanaryConfig()) == (8, 2, 2) and sum(budget(CanaryConfig())) + n_fp + 1 == CanaryConfig().max_requests


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_down_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _baseline().save(path)
    reg = CollectorRegistry()
    cfg = CanaryConfig(baseline=str(path), timeout=2, seed=1, num_problems=2)
    runner = CanaryRunner(cfg, f"http://127.0.0.1:{_closed_port()}", reg, "m")
    assert runner.enabled and runner.passing is None
    # Nothing measured yet: no score, drift or verdict that could read as a failure (0) or a pass.
    exposition = generate_latest(reg).decode()
    for name in ("vllm_canary_score_ratio", "vllm_canary_fingerprint_drift", "vllm_canary_passing"):
        assert reg.get_sample_value(name) is None and f"\n{name} " not in exposition, name
    assert reg.get_sample_value("vllm_canary_score_threshold_ratio") == runner.threshold  # configuration: known
    result = runner.run_once()
    assert result.outcome == "error"
    assert "ConnectError" in result.reason
    assert runner.passing is False
    assert reg.get_sample_value("vllm_canary_runs_total", {"outcome": "error"}) == 1
    assert reg.get_sample_value("vllm_canary_passing") == 0
    # An error measured nothing about accuracy: still no score or drift.
    assert reg.get_sample_value("vllm_canary_score_ratio") is None
    assert reg.get_sample_value("vllm_canary_fingerprint_drift") is None
    assert reg.get_sample_value("vllm_canary_requests_total") >= 1


def test_disabled_without_baseline() -> None:
    reg = CollectorRegistry()
    runner = CanaryRunner(CanaryConfig(enabled=False), "http://127.0.0.1:1", reg)
    assert not runner.enabled
    assert reg.get_sample_value("vllm_canary_configured") == 0
    with pytest.raises(BaselineError, match="enabled but has no baseline"):
        CanaryRunner(CanaryConfig(), "http://127.0.0.1:1", CollectorRegistry())
    with pytest.raises(RuntimeError, match="no baseline"):
        runner.run_once()


def test_bad_baseline_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(BaselineError):
        CanaryRunner(CanaryConfig(baseline=str(tmp_path / "nope.json")), "http://127.0.0.1:1", CollectorRegistry())


def test_baseline_for_other_problems_fails_at_start(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _baseline().save(path)
    with pytest.raises(BaselineError, match="seed 20251202 != baseline's 1"):
        CanaryRunner(CanaryConfig(baseline=str(path)), "http://127.0.0.1:1", CollectorRegistry())
