"""Fresh questions and the per-problem history (issue 30 item 4, issue 35 item 2), against the failure injector
(tests/support/injector.py) behind httpx.MockTransport: every run asks fresh problems no earlier run asked, every
judged request carries a salt of its own (no cached prefix can answer for it), a baseline problem answered wrong in
two of the last three runs fails the canary whatever the score while a one-off flip does not, a fresh family wrong
run after run fails it too, and a canary that cannot build its questions or keep its history errors, never passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner, history, problems
from vllm_rocm_health.canary import runner as runner_mod
from vllm_rocm_health.canary.client import CanaryError
from vllm_rocm_health.canary.runner import fresh_allowed, judge, record_baseline

from tests.support.canary import make_baseline
from tests.support.injector import CanaryAnswerer

SEED, N = 7, 8
TODO = problems.generate(SEED, N)


def setup(tmp_path: Path, **cfg: Any) -> tuple[CanaryRunner, CanaryAnswerer, CollectorRegistry]:
    base = make_baseline(seed=SEED, num_problems=N)  # every answer right: score 1.0, threshold 0.85
    path = tmp_path / "baseline.json"
    base.save(path)
    answerer = CanaryAnswerer(base)
    reg = CollectorRegistry()
    config = CanaryConfig(baseline=str(path), seed=SEED, num_problems=N, idle_probe_after=0.0, timeout=5.0, **cfg)
    return CanaryRunner(config, "http://injector", reg, model="m", transport=answerer.transport()), answerer, reg


def ending(p: problems.Problem) -> str:
    """The last line of a problem's prompt, which the injector's `wrong` matches: only for a question no other
    problem of the run (the long prompts' sums included) asks too."""
    last = p.prompt.splitlines()[-1]
    asked = TODO + problems.long_problems(SEED, 2)
    assert sum(q.prompt.endswith(last) for q in asked) == 1, f"{last!r} is asked twice: pick another problem"
    return last


class Recorder(CanaryAnswerer):
    """The injector, keeping every completion prompt it was asked."""

    def __init__(self, base: Any) -> None:
        super().__init__(base)
        self.prompts: list[str] = []

    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[str, int, Any]:
        if body and "prompt" in body:
            self.prompts.append(str(body["prompt"]))
        return super().answer(method, path, body)


def fresh_asked(tmp_path: Path, runs: int = 3) -> tuple[list[set[str]], Recorder, CanaryConfig]:
    """Passing canary runs against the recorder: the fresh prompts each asked (what no baseline problem, long
    prompt or fingerprint text is), the recorder, the config."""
    base = make_baseline(seed=SEED, num_problems=N)
    path = tmp_path / "b.json"
    base.save(path)
    answerer = Recorder(base)
    cfg = CanaryConfig(baseline=str(path), seed=SEED, num_problems=N, idle_probe_after=0.0, timeout=5.0)
    runner = CanaryRunner(cfg, "http://injector", CollectorRegistry(), model="m", transport=answerer.transport())
    known = {p.prompt for p in TODO} | set(runner_mod.fingerprint.REFERENCE_TEXTS)
    fresh_per_run = []
    for _ in range(runs):
        before = len(answerer.prompts)
        assert runner.run_once().outcome == "pass"
        asked = answerer.prompts[before:]
        fresh_per_run.append({p for p in asked if p not in known and not p.startswith(problems.LONG_TEXT)})
    assert all(len(s) == cfg.fresh_problems for s in fresh_per_run), fresh_per_run
    return fresh_per_run, answerer, cfg


def test_every_run_asks_fresh_problems_and_salts_every_request(tmp_path: Path) -> None:
    fresh_per_run, answerer, _ = fresh_asked(tmp_path)
    assert not (fresh_per_run[0] & fresh_per_run[1]) and not (fresh_per_run[1] & fresh_per_run[2]), fresh_per_run
    # 15 completions a run (8 + 2 long + 2 fresh + 3 fingerprint texts), each with a salt no other request had.
    assert len(answerer.salts) == 3 * 15
    assert None not in answerer.salts and len(set(answerer.salts)) == len(answerer.salts)


def test_no_fresh_prompt_repeats_while_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count family has only 729 prompts: random seeds alone repeat one within a few dozen runs (a real CPU run
    met one in 3). Over more runs than the memory holds, no prompt comes back while remembered, with the seeds made
    to collide on purpose (every run the same seed)."""
    runs = runner_mod.ASKED_FRESH_MEMORY // 2 + 50
    memory: list[str] = []
    for _ in range(runs):
        window = set(memory[-runner_mod.ASKED_FRESH_MEMORY :])
        asked = problems.fresh(7, 2, avoid=window)
        assert not window & {p.prompt for p in asked}
        memory += [p.prompt for p in asked]
    assert len(set(memory[-runner_mod.ASKED_FRESH_MEMORY :])) == runner_mod.ASKED_FRESH_MEMORY


def test_the_runner_asks_nothing_again_even_on_the_same_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_mod.secrets, "randbits", lambda _bits: 5)  # every run draws the same seed
    fresh_per_run, _, _ = fresh_asked(tmp_path)
    assert not (fresh_per_run[0] & fresh_per_run[1]) and not (fresh_per_run[1] & fresh_per_run[2]), fresh_per_run
    assert not fresh_per_run[0] & fresh_per_run[2], fresh_per_run


def test_fresh_problems_are_seeded_and_computed() -> None:
    a, b = problems.fresh(11, 20), problems.fresh(11, 20)
    assert a == b and a != problems.fresh(12, 20)
    assert {p.family for p in a} == set(problems.FRESH_FAMILIES)
    for p in a:
        numbers = [int(x) for x in p.prompt.replace(",", " ").replace("->", " ").split() if x.isdigit()]
        assert p.answer == (numbers[-1] + 1 if p.family == "count" else numbers[-1]), p


def test_a_steady_wrong_answer_fails_whatever_the_score(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runner, answerer, reg = setup(tmp_path)
    p = TODO[3]
    answerer.wrong[ending(p)] = p.answer + 1  # one of 8 wrong: score 0.875, above the 0.85 threshold
    first = runner.run_once()
    assert first.outcome == "pass" and first.score == 0.875, first.reason
    assert reg.get_sample_value("vllm_canary_steady_wrong_problems") == 0
    second = runner.run_once()
    assert second.outcome == "fail" and second.score == 0.875, second.reason
    assert f"problem 3 ({p.question} = {p.answer}" in second.reason and "wrong in 2 of the last 3 runs" in second.reason
    assert reg.get_sample_value("vllm_canary_steady_wrong_problems") == 1
    assert runner.passing is False
    # Right again: it passes once the window holds fewer than two wrong runs.
    answerer.wrong.clear()
    assert runner.run_once().outcome == "fail"  # wrong, wrong, right: still 2 of the last 3
    assert runner.run_once().outcome == "pass"  # wrong, right, right
    assert reg.get_sample_value("vllm_canary_steady_wrong_problems") == 0


def test_a_one_off_flip_passes_and_alternating_flips_fail(tmp_path: Path) -> None:
    runner, answerer, _ = setup(tmp_path)
    p = TODO[5]
    outcomes = []
    for wrong in (True, False, False, True, False, True):  # a one-off, then every other run
        answerer.wrong = {ending(p): p.answer + 2} if wrong else {}
        outcomes.append(runner.run_once().outcome)
    assert outcomes == ["pass", "pass", "pass", "pass", "pass", "fail"], outcomes


def test_a_problem_the_baseline_got_wrong_is_not_tracked(tmp_path: Path) -> None:
    todo = problems.generate(SEED, N)
    answers = [p.answer for p in todo]
    answers[2] = todo[2].answer + 3  # the baseline itself answered problem 2 wrong
    base = make_baseline(seed=SEED, num_problems=N, answers=answers, score=7 / 8)
    path = tmp_path / "b.json"
    base.save(path)
    answerer = CanaryAnswerer(base)
    cfg = CanaryConfig(baseline=str(path), seed=SEED, num_problems=N, idle_probe_after=1e6, timeout=5.0)
    runner = CanaryRunner(cfg, "http://injector", CollectorRegistry(), model="m", transport=answerer.transport())
    answerer.wrong[ending(todo[2])] = todo[2].answer + 4  # another wrong answer, run after run
    assert [runner.run_once().outcome for _ in range(3)] == ["pass"] * 3


def test_fresh_answers_one_wrong_is_allowed_two_fail_and_a_family_wrong_again_fails(tmp_path: Path) -> None:
    runner, answerer, reg = setup(tmp_path, fresh_problems=4, max_requests=18)
    assert fresh_allowed(runner.cfg, 4) == 1
    usage = {"prompt_tokens": 10, "completion_tokens": 1}
    # Every fresh answer wrong: the run fails on its own.
    answerer.override("fresh", 200, {"choices": [{"index": 0, "text": " 1"}], "usage": usage})
    r = runner.run_once()
    assert r.outcome == "fail" and "4 fresh answers wrong (allowed 1)" in r.reason and "run seed" in r.reason, r
    assert reg.get_sample_value("vllm_canary_fresh_score_ratio") == 0.0
    answerer.clear()
    runner.history = history.History()
    # One wrong fresh answer a run: allowed once; its family wrong again in the next run fails.
    calls = {"n": 0}
    original = answerer.answer

    def one_wrong_copy(method: str, path: str, body: dict[str, Any] | None) -> tuple[str, int, Any]:
        kind, status, data = original(method, path, body)
        if kind == "fresh" and "Copy:" in str((body or {}).get("prompt")) and calls["n"] == 0:
            calls["n"] += 1
            return kind, 200, {"choices": [{"index": 0, "text": " 12"}], "usage": usage}
        return kind, status, data

    answerer.answer = one_wrong_copy  # type: ignore[method-assign]
    first = runner.run_once()
    assert first.outcome == "pass", first.reason
    assert reg.get_sample_value("vllm_canary_fresh_score_ratio") == 0.75
    calls["n"] = 0
    second = runner.run_once()
    assert second.outcome == "fail" and "fresh copy problems answered wrong in 2 of the last 3 runs" in second.reason
    assert reg.get_sample_value("vllm_canary_steady_wrong_families") == 1


def test_no_tolerance_no_wrong_fresh_answer() -> None:
    assert fresh_allowed(CanaryConfig(score_tolerance=0.0), 3) == 0
    assert fresh_allowed(CanaryConfig(), 3) == 1
    assert fresh_allowed(CanaryConfig(), 20) == 3


def test_questions_that_cannot_be_built_are_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, answerer, reg = setup(tmp_path)

    def broken(seed: int, count: int, avoid: object = ()) -> list[problems.Problem]:
        raise OSError("no entropy")

    monkeypatch.setattr(problems, "fresh", broken)
    r = runner.run_once()
    assert (r.outcome, r.error_kind) == ("error", "questions") and "no entropy" in r.reason, r
    assert reg.get_sample_value("vllm_canary_errors_total", {"reason": "questions"}) == 1
    assert answerer.seen["problem"] == 0  # nothing was asked
    # Fewer questions than the budget says is no run either.
    monkeypatch.setattr(problems, "fresh", lambda seed, count, avoid=(): [])
    assert runner.run_once().error_kind == "questions"


def test_a_history_that_cannot_be_kept_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, _, reg = setup(tmp_path)

    def broken(*a: object) -> None:
        raise MemoryError("no room")

    monkeypatch.setattr(runner.history, "record", broken)
    r = runner.run_once()
    assert (r.outcome, r.error_kind) == ("error", "history") and "no room" in r.reason, r
    assert runner.passing is False
    assert reg.get_sample_value("vllm_canary_errors_total", {"reason": "history"}) == 1


def test_judge_fresh_and_steady() -> None:
    ok = judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1, [], fresh=([], 1), steady=[])
    assert ok.outcome == "pass"
    assert judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1, [], fresh=(["a"], 1)).outcome == "pass"
    assert judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1, [], fresh=(["a", "b"], 1)).outcome == "fail"
    assert judge(1.0, 0.85, 1.0, 0.0, 0.3, None, [1], 1, [], steady=["problem 0 ..."]).outcome == "fail"


def test_record_refuses_a_model_that_cannot_answer_fresh_problems(tmp_path: Path) -> None:
    from tests.support.injector import AnswererServer

    answerer = CanaryAnswerer(make_baseline(seed=SEED, num_problems=N))
    server = AnswererServer(answerer)
    try:
        cfg = CanaryConfig(seed=SEED, num_problems=N, timeout=5.0)
        base = record_baseline(cfg, server.url)
        assert base.score == 1.0 and answerer.seen["fresh"] == runner_mod.RECORD_FRESH
        answerer.override("fresh", 200, {"choices": [{"index": 0, "text": " 3"}], "usage": {}})
        with pytest.raises(CanaryError, match=r"answered 8 of 8 fresh problems wrong.*--canary-fresh-problems 0"):
            record_baseline(cfg, server.url)
        record_baseline(CanaryConfig(seed=SEED, num_problems=N, timeout=5.0, fresh_problems=0), server.url)
    finally:
        server.close()


def test_the_new_series_are_promtool_clean(tmp_path: Path) -> None:
    import subprocess

    from prometheus_client import generate_latest

    runner, answerer, reg = setup(tmp_path)
    p = TODO[3]
    answerer.wrong[ending(p)] = p.answer + 1
    for _ in range(2):
        runner.run_once()
    text = generate_latest(reg).decode()
    for name in ("fresh_score_ratio", "steady_wrong_problems", "steady_wrong_families"):
        name = "vllm_canary_" + name
        assert f"\n{name} " in text, name
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
