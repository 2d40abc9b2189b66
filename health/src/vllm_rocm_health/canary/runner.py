"""One canary run: arithmetic problems under mixed prefill+decode load, an after-idle probe, and the
fingerprint; compared with the baseline. The sidecar (app.py) runs it periodically in a thread."""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from . import fingerprint, problems
from .baseline import Baseline, BaselineError
from .client import TIMEOUT, CanaryError, CompletionClient
from .config import CanaryConfig
from .metrics import CanaryMetrics

log = logging.getLogger(__name__)


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

    @property
    def server_slow(self) -> bool:
        """The error says the server is slow or overloaded: the next run should back off, not pile on."""
        return self.error_kind == TIMEOUT or self.http_status in (429, 503)


def budget(cfg: CanaryConfig) -> tuple[int, int]:
    """(problems, long prompts) that fit into max_requests next to the fingerprint texts."""
    room = cfg.max_requests - len(fingerprint.REFERENCE_TEXTS)
    n_problems = max(0, min(cfg.num_problems, room))
    n_long = max(0, min(cfg.long_prompts, room - n_problems))
    return n_problems, n_long


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
        self.baseline: Baseline | None = None
        self._passing: bool | None = None
        self.last_reason = "no canary run yet"
        self.last_result: CanaryResult | None = None
        self._last_traffic = 0.0  # monotonic time of the last canary request; 0 = never
        self.last_pass = 0.0  # monotonic time the last passing run ended; 0 = never
        self._http: CompletionClient | None = None
        n_problems, _ = budget(cfg)
        if n_problems < cfg.num_problems:
            log.warning(
                "canary: max_requests=%d leaves room for %d of %d problems",
                cfg.max_requests,
                n_problems,
                cfg.num_problems,
            )
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
        n_problems, _ = budget(self.cfg)
        rounds = 2 + -(-n_problems // self.cfg.concurrency) + len(fingerprint.REFERENCE_TEXTS)
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
        n_problems, n_long = budget(self.cfg)
        base.check_matches(model, self.cfg.seed, self.cfg.num_problems, n_long)
        todo = self.problems[:n_problems]
        answers: list[int | None] = [None] * len(todo)
        long_todo = problems.long_problems(self.cfg.seed, n_long)
        long_answers: list[int | None] = [None] * n_long

        # After idle, the first request alone: cold replays corrupted their own prefill (vllm#52150).
        idle_ok: bool | None = None
        idle = self._last_traffic == 0.0 or t0 - self._last_traffic >= self.cfg.idle_probe_after
        if idle and todo:
            answers[0] = problems.parse_answer(client.complete(model, todo[0].prompt, self.cfg.max_tokens))
            idle_ok = answers[0] == base.answers[0]

        # Long prompts in flight while the problems decode: mixed prefill+decode batches, the broken shape.
        # At most concurrency + long_prompts requests are in flight (budget keeps that within max_requests); on
        # the first failure the requests not yet sent are cancelled, and the pool waits for those in flight
        # (each bounded by the timeout), so a run never leaves requests behind on the server.
        start = 1 if idle_ok is not None else 0
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency) + n_long) as pool:
            longs = [
                pool.submit(client.complete, model, problems.long_prompt(p), self.cfg.max_tokens) for p in long_todo
            ]
            futs = {
                i: pool.submit(client.complete, model, todo[i].prompt, self.cfg.max_tokens)
                for i in range(start, len(todo))
            }
            try:
                for i, f in futs.items():
                    answers[i] = problems.parse_answer(f.result())
                for i, f in enumerate(longs):
                    long_answers[i] = problems.parse_answer(f.result())
            except BaseException:
                for f in (*futs.values(), *longs):
                    f.cancel()
                raise

        score = problems.score(todo, answers)
        current = [client.prompt_logprobs(model, t) for t in fingerprint.REFERENCE_TEXTS]
        drift = fingerprint.drift(base.fingerprints, current)
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
        )
        return verdict

    def _record(self, r: CanaryResult) -> None:
        m = self.metrics
        m.runs.labels(r.outcome).inc()
        m.duration.observe(r.duration)
        if r.score is not None:
            m.score.set(r.score)
        if r.drift is not None:
            m.drift.set(r.drift)
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
) -> CanaryResult:
    """The verdict of one completed run. `pass` needs every measurement present, finite and inside its bound,
    written as positive conditions: a NaN compares false with everything, so `not drift > tolerance` would pass
    it; `drift <= tolerance` does not."""
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
    if failures:
        return CanaryResult("fail", "; ".join(failures), score, drift, idle_ok, answers)
    return CanaryResult("pass", f"score {score:.2f}, drift {drift:.3f}", score, drift, idle_ok, answers)


def record_baseline(cfg: CanaryConfig, base_url: str, model: str | None = None, notes: str = "") -> Baseline:
    """Ask a known-good server the canary's questions, one at a time, and keep its answers and fingerprints."""
    client = CompletionClient(base_url, cfg.timeout)
    try:
        model = model or client.model_id()
        todo = problems.generate(cfg.seed, cfg.num_problems)
        answers = [problems.parse_answer(client.complete(model, p.prompt, cfg.max_tokens)) for p in todo]
        n_long = budget(cfg)[1]
        long_answers = [
            problems.parse_answer(client.complete(model, problems.long_prompt(p), cfg.max_tokens))
            for p in problems.long_problems(cfg.seed, n_long)
        ]
        prints = [client.prompt_logprobs(model, t) for t in fingerprint.REFERENCE_TEXTS]
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
        long_prompts=n_long,
        long_answers=long_answers,
        server_version=version,
        notes=notes,
    )
