"""A canary verdict is `pass` only when everything was checked and right. Bodies of the wrong shape, crashes
inside a run, non-finite logprobs and tampered baselines end in `error`/`fail` or a refusal at start, never in
a pass. The server side is the named failure injector (tests/support/injector.py) behind httpx.MockTransport."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner, fingerprint, problems
from vllm_rocm_health.canary.baseline import Baseline, BaselineError
from vllm_rocm_health.canary.runner import judge

from tests.support.canary import make_baseline
from tests.support.injector import CanaryAnswerer

SEED, N = 7, 6


def setup(tmp_path: Path, **cfg: Any) -> tuple[CanaryRunner, CanaryAnswerer, CollectorRegistry]:
    base = make_baseline(seed=SEED, num_problems=N, long_prompts=int(cfg.get("long_prompts", 2)))
    path = tmp_path / "baseline.json"
    base.save(path)
    answerer = CanaryAnswerer(base)
    reg = CollectorRegistry()
    config = CanaryConfig(
        baseline=str(path), seed=SEED, num_problems=N, max_requests=16, idle_probe_after=0.0, timeout=5.0, **cfg
    )
    return CanaryRunner(config, "http://injector", reg, model="m", transport=answerer.transport()), answerer, reg


def test_the_injector_answers_right_by_default(tmp_path: Path) -> None:
    runner, answerer, _ = setup(tmp_path)
    result = runner.run_once()
    assert result.outcome == "pass", result.reason
    assert answerer.seen["problem"] == N and answerer.seen["fingerprint"] == len(fingerprint.REFERENCE_TEXTS)
    assert answerer.seen["long"] == 2


def test_wrong_answers_to_the_long_prompts_fail_the_run(tmp_path: Path) -> None:
    """The long prompts are the prefill rows of the mixed batch (the rows the AITER FA bug corrupted): their
    answers are checked against the baseline's, each one."""
    runner, answerer, _ = setup(tmp_path)
    answerer.override(
        "long", 200, {"choices": [{"index": 0, "text": " 99"}], "usage": {"prompt_tokens": 100, "completion_tokens": 1}}
    )
    result = runner.run_once()
    assert result.outcome == "fail" and "long prompt 0 answered 99" in result.reason, result
    assert "long prompt 1 answered 99" in result.reason


def test_a_baseline_without_long_answers_matches_only_a_canary_without_long_prompts(tmp_path: Path) -> None:
    raw = json.loads(json.dumps(make_baseline(seed=SEED, num_problems=N, long_prompts=0).__dict__))
    del raw["long_prompts"], raw["long_answers"]
    raw["format"] = 1  # as recorded before long-prompt answers were kept
    path = tmp_path / "old.json"
    path.write_text(json.dumps(raw))
    cfg = dict(baseline=str(path), seed=SEED, num_problems=N, max_requests=16, timeout=5.0)
    with pytest.raises(BaselineError, match="2 long prompts per run != baseline's 0"):
        CanaryRunner(CanaryConfig(**cfg), "http://injector", CollectorRegistry(), model="m")
    CanaryRunner(CanaryConfig(**cfg, long_prompts=0), "http://injector", CollectorRegistry(), model="m")


WRONG_SHAPES = [
    ("problem", [1, 2, 3]),  # a list, not an object
    ("problem", {"choices": []}),  # no choice
    ("problem", {"choices": [{"txt": " 7"}]}),  # missing key
    ("problem", {"choices": [{"text": 7}]}),  # a number where a string belongs
    ("problem", {"choices": [{"text": " 7"}], "usage": {"prompt_tokens": "ten"}}),  # string where a count belongs
    ("problem", {"choices": "all of them"}),
    ("fingerprint", {"choices": [{"index": 0, "text": "x", "logprobs": {"token_logprobs": ["-1.0", "-2.0"]}}]}),
    ("fingerprint", {"choices": [{"text": "x", "logprobs": None}]}),
    ("fingerprint", {"choices": [{"index": 0, "text": "x", "logprobs": {"token_logprobs": [True, False]}}]}),
    ("fingerprint", "ok"),
    ("long", None),
    ("problem", {"choices": [{"index": 0, "text": " 7"}, {"index": 1, "text": " 8"}]}),  # two answers to one prompt
    ("problem", {"choices": [{"index": 1, "text": " 7"}]}),  # an answer to another prompt
    ("problem", {"choices": [{"text": " 7"}]}),  # no index
    ("long", {"choices": [{"index": 0, "text": " 1"}, {"index": 0, "text": " 2"}]}),
    ("models", {"data": "m"}),
    ("models", {"data": [{"id": 42}]}),
]


@pytest.mark.parametrize(("kind", "body"), WRONG_SHAPES)
def test_a_body_of_the_wrong_shape_is_an_error_and_ends_a_standing_pass(tmp_path: Path, kind: str, body: Any) -> None:
    runner, answerer, reg = setup(tmp_path, **({"long_prompts": 1} if kind == "long" else {}))
    if kind == "models":
        runner.model = None  # ask /v1/models
    assert runner.run_once().outcome == "pass"
    assert runner.passing is True
    answerer.override(kind, 200, body)
    result = runner.run_once()  # must not raise
    assert result.outcome == "error", result
    assert result.error_kind == "malformed_response"
    assert runner.passing is False
    assert reg.get_sample_value("vllm_canary_passing") == 0
    assert reg.get_sample_value("vllm_canary_runs_total", {"outcome": "error"}) == 1
    assert reg.get_sample_value("vllm_canary_errors_total", {"reason": "malformed_response"}) == 1
    assert runner.last_reason.startswith("canary error:")


def test_any_exception_inside_a_run_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, _, reg = setup(tmp_path)
    assert runner.run_once().outcome == "pass"

    def boom(text: str) -> int:
        raise ZeroDivisionError("a bug nobody foresaw")

    monkeypatch.setattr(problems, "parse_answer", boom)
    result = runner.run_once()
    assert (result.outcome, result.error_kind) == ("error", "internal")
    assert "ZeroDivisionError" in result.reason
    assert runner.passing is False
    assert reg.get_sample_value("vllm_canary_errors_total", {"reason": "internal"}) == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, None])
def test_non_finite_or_null_logprobs_never_agree(tmp_path: Path, bad: float | None) -> None:
    runner, answerer, reg = setup(tmp_path)
    good = answerer.baseline.fingerprints[1]
    lps = [None, bad, *good[2:]]
    answerer.override("fingerprint", 200, {"choices": [{"index": 0, "text": "x", "logprobs": {"token_logprobs": lps}}]})
    result = runner.run_once()
    assert result.outcome == "fail", result
    assert result.drift == math.inf and "drift" in result.reason
    assert reg.get_sample_value("vllm_canary_fingerprint_drift") == math.inf


def test_drift_needs_finite_agreement() -> None:
    base = [[None, -1.0, -2.0]]
    assert fingerprint.drift(base, [[None, -1.0, -2.0]]) == 0.0
    for cur in ([[None, math.nan, -2.0]], [[None, -1.0, math.inf]], [[None, None, -2.0]], [[-1.0, -1.0, -2.0]]):
        assert fingerprint.drift(base, cur) == math.inf, cur
    assert fingerprint.drift([[None, None]], [[None, None]]) == math.inf  # nothing compared is no agreement
    assert fingerprint.drift([], []) == math.inf


def test_judge_passes_only_finite_measurements_inside_bounds() -> None:
    ok = judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1, [])
    assert ok.outcome == "pass"
    for score, drift in ((math.nan, 0.0), (1.0, math.nan), (0.5, 0.0), (1.0, 0.31), (-math.inf, 0.0)):
        assert judge(score, 0.85, 1.0, drift, 0.3, None, [1], 1, []).outcome == "fail", (score, drift)
    assert judge(1.0, 0.85, 1.0, 0.0, 0.3, False, [2], 1, []).outcome == "fail"
    # the long prompts' answers must have been checked, and right
    assert judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1).outcome == "fail"
    assert judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1, ["long prompt 0 answered 3, baseline 4"]).outcome == "fail"


# -- baselines: every field checked, named ---------------------------------------------------------------------
def _write(tmp_path: Path, **changes: Any) -> Path:
    raw = json.loads(json.dumps(make_baseline(seed=SEED, num_problems=N).__dict__))
    raw.update(changes)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"score": "0.75"}, "score"),
        ({"score": -0.5}, "score"),
        ({"score": 1.5}, "score"),
        ({"score": math.nan}, "score"),
        ({"score": 0.5}, "does not match its answers"),
        ({"num_problems": "6"}, "num_problems"),
        ({"num_problems": True}, "num_problems"),
        ({"seed": 1.5}, "seed"),
        ({"answers": "1,2,3"}, "answers"),
        ({"answers": [1, 2, "3", 4, 5, 6]}, "answers"),
        ({"model": 3}, "model"),
        ({"fingerprints": [[None, -1.0]]}, "fingerprints"),
        ({"fingerprints": [[None, "x"], [None, -1.0], [None, -1.0]]}, "fingerprints[0]"),
        ({"fingerprints": [[None, -1.0], [None, math.inf], [None, -1.0]]}, "fingerprints[1]"),
        ({"fingerprints": [[None, None], [None, -1.0], [None, -1.0]]}, "fingerprints[0]"),
        ({"created": "yesterday"}, "created"),
        ({"surprise": 1}, "unknown fields ['surprise']"),
        ({"format": "1"}, "format"),
    ],
)
def test_baseline_fields_are_checked_and_named(tmp_path: Path, changes: dict[str, Any], field: str) -> None:
    with pytest.raises(BaselineError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Baseline.load(_write(tmp_path, **changes))


def test_baseline_that_is_a_list_or_misses_fields(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text("[1, 2]")
    with pytest.raises(BaselineError, match="expected a JSON object"):
        Baseline.load(path)
    path.write_text(json.dumps({"format": 1, "model": "m"}))
    with pytest.raises(BaselineError, match="missing fields"):
        Baseline.load(path)


def test_a_baseline_that_leaves_nothing_to_detect_is_refused(tmp_path: Path) -> None:
    todo = problems.generate(SEED, N)
    answers = [p.answer + 1 for p in todo]
    answers[0] = todo[0].answer  # 1 of 6 right: score 0.17, threshold 0.02 with the default tolerance 0.15
    path = _write(tmp_path, answers=answers, score=1 / 6)
    Baseline.load(path)  # a consistent file...
    with pytest.raises(BaselineError, match="could never fail"):  # ...but the canary could not see wrong answers
        CanaryRunner(
            CanaryConfig(baseline=str(path), seed=SEED, num_problems=N, score_tolerance=0.2),
            "http://x",
            CollectorRegistry(),
            model="m",
        )


# -- property: arbitrary answers never make a false pass --------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
numbers = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5) | st.text(max_size=3)


@st.composite
def problem_bodies(draw: st.DrawFn) -> Any:
    text = draw(st.text(max_size=6) | st.integers(-2, 20).map(lambda n: f" {n}") | json_values)
    return draw(
        st.sampled_from(
            [
                {"choices": [{"text": text}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
                {"choices": [{"text": text}]},
                draw(json_values),
            ]
        )
    )


@st.composite
def fingerprint_bodies(draw: st.DrawFn, base: list[float | None]) -> Any:
    values = [v if draw(st.booleans()) else draw(numbers) for v in base]
    values = values[: draw(st.integers(0, len(values) + 1))] + draw(st.lists(numbers, max_size=1))
    return draw(
        st.sampled_from(
            [
                {"choices": [{"index": 0, "text": "x", "logprobs": {"token_logprobs": values}}]},
                {"choices": [{"logprobs": {"token_logprobs": draw(json_values)}}]},
                draw(json_values),
            ]
        )
    )


def _problem_oracle(body: Any, threshold: float) -> bool:
    """Could a server answering every problem with this body deserve a pass? Only if it is a 200 whose text
    holds the right sum for enough problems."""
    try:
        text = body["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return False
    if not isinstance(text, str):
        return False
    todo = problems.generate(SEED, N)
    return problems.score(todo, [problems.parse_answer(text)] * N) >= threshold


def _fingerprint_oracle(body: Any, base: list[float | None], tolerance: float) -> bool:
    try:
        values = body["choices"][0]["logprobs"]["token_logprobs"]
    except (KeyError, IndexError, TypeError):
        return False
    if not isinstance(values, list) or len(values) != len(base):
        return False
    for b, v in zip(base, values, strict=True):
        if b is None and v is None:
            continue
        if b is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        if not abs(v - b) <= tolerance:
            return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    status=st.sampled_from([200, 200, 200, 201, 204, 400, 404, 429, 500, 503]),
    kind=st.sampled_from(["problem", "fingerprint"]),
)
def test_property_pass_only_when_answers_and_fingerprint_are_right(
    tmp_path: Path, data: st.DataObject, status: int, kind: str
) -> None:
    runner, answerer, _ = setup(tmp_path)
    base_fp = answerer.baseline.fingerprints[0]
    if kind == "problem":
        body = data.draw(problem_bodies())
        deserved = status == 200 and _problem_oracle(body, runner.threshold)
    else:
        body = data.draw(fingerprint_bodies(base_fp))
        # The same body answers all three texts, so it has to fit every one of them.
        deserved = status == 200 and all(
            _fingerprint_oracle(body, fp, runner.cfg.fingerprint_tolerance) for fp in answerer.baseline.fingerprints
        )
    answerer.override(kind, status, body)
    result = runner.run_once()
    assert result.outcome in ("pass", "fail", "error")
    if result.outcome == "pass":
        assert deserved, (status, body, result)
    if status != 200:
        assert result.outcome == "error", (status, result)
