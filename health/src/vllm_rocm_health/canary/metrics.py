"""The canary's Prometheus metrics (names per docs/contracts.md)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .client import CONNECTION, HTTP_STATUS, MALFORMED, TIMEOUT

# Bounded label values of vllm_canary_errors_total (docs/contracts.md).
ERROR_REASONS = (TIMEOUT, CONNECTION, HTTP_STATUS, MALFORMED, "baseline_mismatch", "internal")


class CanaryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.score = Gauge("vllm_canary_score_ratio", "Last canary task score (exact-answer problems), 0..1",
                           registry=registry)
        self.threshold = Gauge("vllm_canary_score_threshold_ratio",
                               "Score below which the canary fails (baseline score minus tolerance)", registry=registry)
        self.drift = Gauge("vllm_canary_fingerprint_drift",
                           "Max per-token prompt logprob difference from the baseline, in nats", registry=registry)
        self.tolerance = Gauge("vllm_canary_fingerprint_tolerance", "Fingerprint drift tolerance in force, in nats",
                               registry=registry)
        self.passing = Gauge("vllm_canary_passing", "1 when the last canary run passed", registry=registry)
        self.runs = Counter("vllm_canary_runs", "Canary runs by outcome", ["outcome"], registry=registry)
        self.errors = Counter("vllm_canary_errors", "Canary runs that ended in an error, by what went wrong",
                              ["reason"], registry=registry)
        self.last_success = Gauge("vllm_canary_last_success_timestamp_seconds",
                                  "Unix time of the last passing canary run", registry=registry)
        self.interval = Gauge("vllm_canary_interval_seconds", "Configured seconds between canary runs",
                              registry=registry)
        self.duration = Histogram("vllm_canary_duration_seconds", "Wall time of one canary run",
                                  buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300), registry=registry)
        self.requests = Counter("vllm_canary_requests", "Requests the canary sent to the server", registry=registry)
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
