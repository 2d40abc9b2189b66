"""The canary's Prometheus metrics (names per docs/contracts.md)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .client import CONNECTION, HISTORY, HTTP_STATUS, MALFORMED, QUESTIONS, TIMEOUT
from .history import STEADY, WINDOW

# Bounded label values of vllm_canary_errors_total (docs/contracts.md).
ERROR_REASONS = (TIMEOUT, CONNECTION, HTTP_STATUS, MALFORMED, "baseline_mismatch", QUESTIONS, HISTORY, "internal")


class MeasuredGauge(Collector):
    """A gauge that is absent until its first measurement. A plain Gauge reads 0 from the start, and a score of
    0 (or "not passing") before the first canary run looks like a failure: it put VllmCanaryScoreBelowThreshold
    into pending at every start. Absent means "not measured yet", which alert rules and dashboards treat as such."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self._value: float | None = None
        self._lock = threading.Lock()
        registry.register(self)

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def get(self) -> float | None:
        with self._lock:
            return self._value

    def collect(self) -> Iterator[GaugeMetricFamily]:
        value = self.get()
        if value is not None:
            yield GaugeMetricFamily(self.name, self.documentation, value=value)


class CanaryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.configured = Gauge(
            "vllm_canary_configured",
            "1 when the accuracy canary runs; 0 when it was switched off on purpose "
            "(--no-canary-enabled): wrong tokens are then not caught",
            registry=registry,
        )
        # score, drift, passing: absent until a canary run measured them (MeasuredGauge)
        self.score = MeasuredGauge(
            "vllm_canary_score_ratio", "Last canary task score (exact-answer problems), 0..1", registry
        )
        self.threshold = Gauge(
            "vllm_canary_score_threshold_ratio",
            "Score below which the canary fails (baseline score minus tolerance)",
            registry=registry,
        )
        self.drift = MeasuredGauge(
            "vllm_canary_fingerprint_drift",
            "Max per-token prompt logprob difference from the baseline, in nats",
            registry,
        )
        self.fresh_score = MeasuredGauge(
            "vllm_canary_fresh_score_ratio",
            "Last canary run's score on its fresh problems (new every run, answers computed), 0..1",
            registry,
        )
        self.steady_problems = MeasuredGauge(
            "vllm_canary_steady_wrong_problems",
            f"Baseline problems the baseline answered right that were answered wrong in {STEADY} of the last {WINDOW} "
            "runs",
            registry,
        )
        self.steady_families = MeasuredGauge(
            "vllm_canary_steady_wrong_families",
            f"Fresh problem families with a wrong answer in {STEADY} of the last {WINDOW} runs",
            registry,
        )
        self.tolerance = Gauge(
            "vllm_canary_fingerprint_tolerance", "Fingerprint drift tolerance in force, in nats", registry=registry
        )
        self.passing = MeasuredGauge("vllm_canary_passing", "1 when the last canary run passed", registry)
        self.runs = Counter("vllm_canary_runs", "Canary runs by outcome", ["outcome"], registry=registry)
        self.errors = Counter(
            "vllm_canary_errors",
            "Canary runs that ended in an error, by what went wrong",
            ["reason"],
            registry=registry,
        )
        self.last_success = Gauge(
            "vllm_canary_last_success_timestamp_seconds", "Unix time of the last passing canary run", registry=registry
        )
        self.interval = Gauge(
            "vllm_canary_interval_seconds", "Configured seconds between canary runs", registry=registry
        )
        self.duration = Histogram(
            "vllm_canary_duration_seconds",
            "Wall time of one canary run",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=registry,
        )
        self.requests = Counter("vllm_canary_requests", "Requests the canary sent to the server", registry=registry)
        self.abandoned = Counter(
            "vllm_canary_requests_abandoned",
            "Canary requests given up at the timeout; their connection is closed, which makes vLLM abort them",
            registry=registry,
        )
        self.tokens = Counter("vllm_canary_tokens", "Tokens the canary caused, by kind", ["kind"], registry=registry)
        for outcome in ("pass", "fail", "error"):
            self.runs.labels(outcome)
        for kind in ("prompt", "completion"):
            self.tokens.labels(kind)
        for reason in ERROR_REASONS:
            self.errors.labels(reason)

    def count_usage(self, prompt: int, completion: int) -> None:
        self.tokens.labels("prompt").inc(prompt)
        self.tokens.labels("completion").inc(completion)
