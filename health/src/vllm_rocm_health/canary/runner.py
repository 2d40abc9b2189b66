"""One canary run: the baseline's problems and fresh ones under mixed prefill+decode load, an after-idle probe, and
the fingerprint; compared with the baseline, the computed answers and the history of earlier runs. Every request
carries a salt of its own, so no answer the canary judges comes from a cached prefix. The sidecar (app.py) runs it
periodically in a thread."""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import httpx
from prometheus_client import CollectorRegistry

from . import fingerprint, problems
from .baseline import Baseline, BaselineError
from .client import HISTORY, QUESTIONS, TIMEOUT, CanaryError, CompletionClient, new_salt
from .config import CanaryConfig
from .history import WINDOW, History
from .metrics import CanaryMetrics

log = logging.getLogger(__name__)
# 256 runs of the default 2 fresh problems (a day at a 5-minute interval); the count family has 729 prompts.
ASKED_FRESH_MEMORY = 512


@dataclass
class CanaryResult:
    outcome: str  # pass | fail | error
    reason: str
    score: float | None = None
    drift: float | None = None
    idle_probe: bool | None = None  # None: no idle probe this run
    answers: list[int | None] = field(default_factory=list)
    duration: float = 0.0
    error_kind: str = ""  # for outcome "error": timeout, connection, http_status, malformed_response, ...
    http_status: int | None = None
    fresh_score: float | None = None  # None: no fresh problems this run

    @property
    def server_slow(self) -> bool:
        """The error says the server is slow or overloaded: the next run should back off, not pile on."""
        return self.error_kind == TIMEOUT or self.http_status in (429, 503)


class Budget(NamedTuple):
    problems: int
    long: int
    fresh: int


def budget(cfg: CanaryConfig) -> Budget:
    """What fits into max_requests next to the fingerprint texts, in this order: the baseline's problems, the long
    prompts (both must match the baseline, so they are counted as before), the fresh problems, which also leave room
    for the /v1/models request a run makes when no --model is given."""
    room = cfg.max_requests - len(fingerprint.REFERENCE_TEXTS)
    n_problems = max(0, min(cfg.num_problems, room))
    n_long = max(0, min(cfg.long_prompts, room - n_problems))
    n_fresh = max(0, min(cfg.fresh_problems, room - 1 - n_problems - n_long))
    return Budget(n_problems, n_long, n_fresh)


def fresh_allowed(cfg: CanaryConfig, n_fresh: int) -> int:
    """Wrong fresh answers one run may have: the score tolerance's share, at least one while any tolerance is set (a
    model that gets nearly all of them right may still miss one now and then; a family wrong again is the history's
    to catch)."""
    return 0 if cfg.score_tolerance == 0 else max(1, math.floor(cfg.score_tolerance * n_fresh))


class CanaryRunner:
    def __init__(
        self,
        cfg: CanaryConfig,
        base_url: str,
        registry: CollectorRegistry,
        model: str | None = None,
        transport: httpx.BaseTransport | None = None,
        baseline: Baseline | None = None,
    ) -> None:
        self.cfg = cfg
        self.transport = transport
        self.base_url = base_url
        self.model = model
        self.metrics = CanaryMetrics(registry)
        self.metrics.interval.set(cfg.interval)
        self.metrics.tolerance.set(cfg.fingerprint_tolerance)
        self.problems = problems.generate(cfg.seed, cfg.num_problems)
        self.history = History()
        # The fresh prompts of the last runs, never asked again while remembered (problems.fresh redraws them).
        self._asked_fresh: deque[str] = deque(maxlen=ASKED_FRESH_MEMORY)
        self.baseline: Baseline | None = None
        self._passing: bool | None = None
        self.last_reason = "no canary run yet"
        self.last_result: CanaryResult | None = None
        self._last_traffic = 0.0  # monotonic time of the last canary request; 0 = never
        self.last_pass = 0.0  # monotonic time the last passing run ended; 0 = never
        self._http: CompletionClient | None = None
        room = budget(cfg)
        for what, fits, asked in (
            ("problems", room.problems, cfg.num_problems),
            ("fresh problems", room.fresh, cfg.fresh_problems),
        ):
            if fits < asked:
                log.warning("canary: max_requests=%d leaves room for %d of %d %s", cfg.max_requests, fits, asked, what)
        self.metrics.configured.set(int(cfg.enabled))
        if cfg.enabled and (cfg.baseline or baseline is not None):
            # A bad baseline is a configuration error: fail at start, not at the first run.
            self.baseline = Baseline.load(Path(cfg.baseline)) if cfg.baseline else baseline
            assert self.baseline is not None
            self.baseline.check_matches(
                model if model is not None else self.baseline.model, cfg.seed, cfg.num_problems, budget(cfg)[1]
            )
            if self.threshold <= 0.0:
                raise BaselineError(
                    f"baseline score {self.baseline.score:.2f} minus --canary-score-tolerance {cfg.score_tolerance} "
                    "leaves a threshold of 0: the score check could never fail. Record the baseline with a model and "
                    "problem set it answers (most sums right), or lower the tolerance"
                )
            self.metrics.threshold.set(self.threshold)

        elif cfg.enabled:
            raise BaselineError("the canary is enabled but has no baseline")

    @property
    def enabled(self) -> bool:
        return self.baseline is not None

    @property
    def passing(self) -> bool | None:
        return self._passing

    @property
    def threshold(self) -> float:
        assert self.baseline is not None
        return max(0.0, self.baseline.score - self.cfg.score_tolerance)

    def _client(self) -> CompletionClient:
        # One client for the runner's life: a new httpx client per run builds a new SSL context, and those
        # cost ~40 KiB of native memory each that the allocator did not give back (RSS grew ~4 MiB per 100 runs).
        if self._http is None:
            self._http = CompletionClient(
                self.base_url,
                self.cfg.timeout,
                on_request=self.metrics.requests.inc,
                on_usage=self.metrics.count_usage,
                transport=self.transport,
                on_abandon=self.metrics.abandoned.inc,
            )
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    @property
    def max_run_seconds(self) -> float:
        """How long one run can take at most: each request is bounded by the timeout, and a run makes at most this
        many rounds of them (model id, idle probe, the problems `concurrency` at a time, the fingerprint texts).
        The canary thread beats between runs, so one silent for much longer than this is stuck."""
        room = budget(self.cfg)
        rounds = 2 + -(-(room.problems + room.fresh) // self.cfg.concurrency) + len(fingerprint.REFERENCE_TEXTS)
        return rounds * self.cfg.timeout + 5.0

    def run_once(self) -> CanaryResult:
        """One run; never raises. Whatever goes wrong inside it (a server error, a body of a shape nobody foresaw,
        a bug here) is an `error` outcome, recorded like any other: a verdict is `pass` only when the run got to
        the end and every check was made and right."""
        if self.baseline is None:
            raise RuntimeError("canary has no baseline (set --canary-baseline)")
        t0 = time.monotonic()
        try:
            result = self._run(self._client(), self.baseline, t0)
        except CanaryError as e:
            result = CanaryResult("error", str(e), error_kind=e.kind, http_status=e.status)
        except BaselineError as e:
            result = CanaryResult("error", str(e), error_kind="baseline_mismatch")
        except Exception as e:  # noqa: BLE001 - never let a crash leave the previous pass standing
            log.exception("canary run crashed")
            result = CanaryResult("error", f"internal error: {type(e).__name__}: {e}", error_kind="internal")
        finally:
            self._last_traffic = time.monotonic()
        result.duration = time.monotonic() - t0
        self._record(result)
        return result

    def _run(self, client: CompletionClient, base: Baseline, t0: float) -> CanaryResult:
        model = self.model or client.model_id()
        room = budget(self.cfg)
        base.check_matches(model, self.cfg.seed, self.cfg.num_problems, room.long)
        try:
            todo = self.problems[: room.problems]
            # A seed of its own for every run: questions no earlier run asked (it is logged with a failure).
            run_seed = secrets.randbits(63)
            fresh_todo = problems.fresh(run_seed, room.fresh, avoid=set(self._asked_fresh))
            self._asked_fresh.extend(p.prompt for p in fresh_todo)
            long_todo = problems.long_problems(self.cfg.seed, room.long)
            if (len(todo), len(fresh_todo), len(long_todo)) != (room.problems, room.fresh, room.long):
                raise ValueError(f"built {len(todo)}, {len(fresh_todo)}, {len(long_todo)} questions for {room}")
        except Exception as e:  # noqa: BLE001 - a canary that cannot build its questions asks nothing and says so
            raise CanaryError(f"could not build this run's questions: {type(e).__name__}: {e}", QUESTIONS) from e
        answers: list[int | None] = [None] * len(todo)
        fresh_answers: list[int | None] = [None] * len(fresh_todo)
        long_answers: list[int | None] = [None] * len(long_todo)

        def ask(prompt: str) -> str:
            # Each request its own salt: no cached block of any earlier request (or of this run) can be reused.
            return client.complete(model, prompt, self.cfg.max_tokens, salt=new_salt())

        # After idle, the first request alone: cold replays corrupted their own prefill (vllm#52150).
        idle_ok: bool | None = None
        idle = self._last_traffic == 0.0 or t0 - self._last_traffic >= self.cfg.idle_probe_after
        if idle and todo:
            answers[0] = problems.parse_answer(ask(todo[0].prompt))
            idle_ok = answers[0] == base.answers[0]

        # Long prompts in flight while the problems decode: mixed prefill+decode batches, the broken shape.
        # At most concurrency + long_prompts requests are in flight (budget keeps that within max_requests); on
        # the first failure the requests not yet sent are cancelled, and the pool waits for those in flight
        # (each bounded by the timeout), so a run never leaves requests behind on the server.
        start = 1 if idle_ok is not None else 0
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency) + len(long_todo)) as pool:
            longs = [pool.submit(ask, problems.long_prompt(p)) for p in long_todo]
            futs = {i: pool.submit(ask, todo[i].prompt) for i in range(start, len(todo))}
            fresh_futs = [pool.submit(ask, p.prompt) for p in fresh_todo]
            try:
                for i, f in futs.items():
                    answers[i] = problems.parse_answer(f.result())
                for i, f in enumerate(fresh_futs):
                    fresh_answers[i] = problems.parse_answer(f.result())
                for i, f in enumerate(longs):
                    long_answers[i] = problems.parse_answer(f.result())
            except BaseException:
                for f in (*futs.values(), *fresh_futs, *longs):
                    f.cancel()
                raise

        score = problems.score(todo, answers)
        current = [client.prompt_logprobs(model, t, salt=new_salt()) for t in fingerprint.REFERENCE_TEXTS]
        drift = fingerprint.drift(base.fingerprints, current)
        fresh_wrong = [
            f"fresh {p.family} problem {p.question.splitlines()[-1]!r} answered {a}, computed {p.answer}"
            for p, a in zip(fresh_todo, fresh_answers, strict=True)
            if a != p.answer
        ]
        steady = self._remember(todo, answers, base, fresh_todo, fresh_answers)
        verdict = judge(
            score,
            self.threshold,
            base.score,
            drift,
            self.cfg.fingerprint_tolerance,
            idle_ok,
            answers,
            base.answers[0] if base.answers else None,
            long_mismatches(long_answers, base.long_answers),
            fresh=None if not fresh_todo else (fresh_wrong, fresh_allowed(self.cfg, len(fresh_todo))),
            steady=steady,
        )
        if fresh_todo:
            verdict.fresh_score = problems.score(fresh_todo, fresh_answers)
        if verdict.outcome == "fail" and fresh_todo:
            verdict.reason += f" (fresh problems of run seed {run_seed})"
        return verdict

    def _remember(
        self,
        todo: list[problems.Problem],
        answers: list[int | None],
        base: Baseline,
        fresh_todo: list[problems.Problem],
        fresh_answers: list[int | None],
    ) -> list[str]:
        """Add this run to the history; what it now shows steadily wrong, in words. A history that cannot be kept is
        an error of the run, never a pass without it."""
        try:
            tracked = {i: answers[i] != p.answer for i, p in enumerate(todo) if base.answers[i] == p.answer}
            families: dict[str, bool] = {}
            for p, a in zip(fresh_todo, fresh_answers, strict=True):
                families[p.family] = families.get(p.family, False) or a != p.answer
            self.history.record(tracked, families)
            steady = [
                f"problem {i} ({todo[i].question} = {todo[i].answer}, which the baseline answered right) answered "
                f"wrong in {self.history.wrong_runs(i)} of the last {WINDOW} runs (now {answers[i]})"
                for i in self.history.steady_problems()
                if i < len(todo)
            ]
            steady += [
                f"fresh {f} problems answered wrong in {self.history.family_wrong_runs(f)} of the last {WINDOW} runs"
                for f in self.history.steady_families()
            ]
            self.metrics.steady_problems.set(len(self.history.steady_problems()))
            self.metrics.steady_families.set(len(self.history.steady_families()))
        except Exception as e:  # noqa: BLE001
            raise CanaryError(f"could not keep the per-problem history: {type(e).__name__}: {e}", HISTORY) from e
        return steady

    def _record(self, r: CanaryResult) -> None:
        m = self.metrics
        m.runs.labels(r.outcome).inc()
        m.duration.observe(r.duration)
        if r.score is not None:
            m.score.set(r.score)
        if r.drift is not None:
            m.drift.set(r.drift)
        if r.fresh_score is not None:
            m.fresh_score.set(r.fresh_score)
        previous = self._passing
        # An error (server unreachable) says nothing about accuracy, but is no proof of health either.
        self._passing = r.outcome == "pass"
        m.passing.set(1 if self._passing else 0)
        if self._passing:
            m.last_success.set(time.time())
            self.last_pass = time.monotonic()
        if r.outcome == "error":
            m.errors.labels(r.error_kind or "internal").inc()
        self.last_reason = f"canary {r.outcome}: {r.reason}"
        self.last_result = r
        level = logging.INFO if r.outcome == "pass" and previous is not False else logging.WARNING
        log.log(level, "canary %s in %.1f s: %s", r.outcome, r.duration, r.reason)


def long_mismatches(answers: list[int | None], baseline: list[int | None]) -> list[str]:
    """The long prompts whose answer is not the baseline's (all of them when the counts differ)."""
    if len(answers) != len(baseline):
        return [f"{len(answers)} long-prompt answers for the baseline's {len(baseline)}"]
    pairs = enumerate(zip(answers, baseline, strict=True))
    return [f"long prompt {i} answered {a}, baseline {b}" for i, (a, b) in pairs if a != b]


def judge(
    score: float,
    threshold: float,
    baseline_score: float,
    drift: float,
    tolerance: float,
    idle_ok: bool | None,
    answers: list[int | None],
    baseline_first: int | None,
    long_wrong: list[str] | None = None,
    fresh: tuple[list[str], int] | None = None,
    steady: list[str] | None = None,
) -> CanaryResult:
    """The verdict of one completed run. `pass` needs every measurement present, finite and inside its bound,
    written as positive conditions: a NaN compares false with everything, so `not drift > tolerance` would pass
    it; `drift <= tolerance` does not. `fresh`: the wrong fresh answers and how many are allowed (None: the run asked
    none); `steady`: what the history shows wrong run after run, which fails the run whatever the score."""
    failures = []
    if not (math.isfinite(score) and score >= threshold):
        failures.append(f"score {score:.2f} < threshold {threshold:.2f} (baseline {baseline_score:.2f})")
    if not (math.isfinite(drift) and drift <= tolerance):
        failures.append(f"fingerprint drift {drift:.3f} > {tolerance} nats")
    if idle_ok is False:
        failures.append(f"after-idle probe answered {answers[0]}, baseline {baseline_first}")
    if long_wrong is None:
        failures.append("the long prompts' answers were not checked")
    else:
        failures.extend(long_wrong)
    if fresh is not None:
        wrong, allowed = fresh
        if not len(wrong) <= allowed:
            failures.append(f"{len(wrong)} fresh answers wrong (allowed {allowed}): " + "; ".join(wrong))
    failures.extend(steady or [])
    if failures:
        return CanaryResult("fail", "; ".join(failures), score, drift, idle_ok, answers)
    return CanaryResult("pass", f"score {score:.2f}, drift {drift:.3f}", score, drift, idle_ok, answers)


def record_baseline(cfg: CanaryConfig, base_url: str, model: str | None = None, notes: str = "") -> Baseline:
    """Ask a known-good server the canary's questions, one at a time, and keep its answers and fingerprints. Fresh
    problems are asked too (and not kept: they are new every run): a model that gets more of them wrong than a run
    allows would fail every canary run, so no baseline is written for it."""
    client = CompletionClient(base_url, cfg.timeout)
    try:
        model = model or client.model_id()

        def ask(prompt: str) -> int | None:
            return problems.parse_answer(client.complete(model, prompt, cfg.max_tokens, salt=new_salt()))

        todo = problems.generate(cfg.seed, cfg.num_problems)
        answers = [ask(p.prompt) for p in todo]
        room = budget(cfg)
        long_answers = [ask(problems.long_prompt(p)) for p in problems.long_problems(cfg.seed, room.long)]
        prints = [client.prompt_logprobs(model, t, salt=new_salt()) for t in fingerprint.REFERENCE_TEXTS]
        if room.fresh:
            check = problems.fresh(secrets.randbits(63), RECORD_FRESH)
            wrong = [f"{p.question.splitlines()[-1]!r} -> {a}" for p in check if (a := ask(p.prompt)) != p.answer]
            if len(wrong) > fresh_allowed(cfg, RECORD_FRESH):
                raise CanaryError(
                    f"{model} answered {len(wrong)} of {RECORD_FRESH} fresh problems wrong ({'; '.join(wrong)}): "
                    "the canary's fresh questions would fail every run on this server. Check the server; for a model "
                    "too small to continue a count or copy a number, record with --fresh-problems 0 and run the "
                    "sidecar with --canary-fresh-problems 0 (its runs then ask only what the baseline recorded)",
                    QUESTIONS,
                )
        version = client.server_version()
    finally:
        client.close()
    return Baseline(
        model=model,
        seed=cfg.seed,
        num_problems=cfg.num_problems,
        max_tokens=cfg.max_tokens,
        answers=answers,
        score=problems.score(todo, answers),
        fingerprints=prints,
        long_prompts=room.long,
        long_answers=long_answers,
        server_version=version,
        notes=notes,
    )


RECORD_FRESH = 8  # fresh problems asked when a baseline is recorded
