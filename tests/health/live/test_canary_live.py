"""The canary against the REAL vLLM CPU server (SmolLM2-135M-Instruct, eager): baseline, pass, stable
fingerprint, mixed traffic + idle probe, failure on a perturbed model, errors when the server is down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner

from tests.support.canary import CFG
from tests.support.vllm_server import VllmServer, free_port

pytestmark = pytest.mark.integration


def runner(path: Path, url: str, registry: CollectorRegistry | None = None, **kw: object) -> CanaryRunner:
    cfg = CanaryConfig(baseline=str(path), **{**CFG, **kw})  # type: ignore[arg-type]
    return CanaryRunner(cfg, url, registry or CollectorRegistry(), model=None)


def test_baseline_content(baseline_file: Path, vllm_server: VllmServer) -> None:
    b = json.loads(baseline_file.read_text())
    assert b["model"] == vllm_server.served_model_name
    assert len(b["answers"]) == CFG["num_problems"]
    # The model really answers (integers parsed). The canary compares against the baseline's own score, not 1.0:
    # a small model does not get every sum right.
    assert sum(a is not None for a in b["answers"]) >= CFG["num_problems"] // 2, b
    # ...and gets most sums right at temperature 0 (deterministic: a drop here means the problem format or the
    # answer parser regressed, and a canary with a score near 0 could not see wrong answers).
    assert b["score"] >= 0.5, b
    assert all(len(fp) > 5 for fp in b["fingerprints"])


def test_canary_passes_and_fingerprint_is_stable(baseline_file: Path, vllm_server: VllmServer) -> None:
    reg = CollectorRegistry()
    r = runner(baseline_file, vllm_server.base_url, reg)
    assert r.passing is None
    first = r.run_once()
    second = r.run_once()
    for res in (first, second):
        assert res.outcome == "pass", res.reason
        assert res.drift is not None and res.drift < 0.01  # same server, same config: ~0 (bf16 noise at most)
        assert res.idle_probe is True  # idle_probe_after=0: every run starts with a scored after-idle probe
    assert r.passing is True
    assert reg.get_sample_value("vllm_canary_runs_total", {"outcome": "pass"}) == 2
    assert reg.get_sample_value("vllm_canary_passing") == 1
    sent = reg.get_sample_value("vllm_canary_requests_total")
    assert sent is not None and 2 * 10 <= sent <= 2 * CFG["max_requests"]
    # Long prompts were in flight: prompt tokens far exceed what the short problems alone would cause.
    assert (reg.get_sample_value("vllm_canary_tokens_total", {"kind": "prompt"}) or 0) > 1000
    assert (reg.get_sample_value("vllm_canary_tokens_total", {"kind": "completion"}) or 0) > 0


def test_canary_fails_on_perturbed_model(baseline_file: Path, vllm_perturbed_server: VllmServer) -> None:
    """Same served name, HTTP 200, wrong weights: the canary must say fail, not error."""
    r = runner(baseline_file, vllm_perturbed_server.base_url)
    res = r.run_once()
    assert res.outcome == "fail", res.reason
    assert res.drift is not None and res.drift > CanaryConfig().fingerprint_tolerance
    assert r.passing is False
    assert "drift" in r.last_reason


def test_server_down_is_an_error_not_a_crash(baseline_file: Path) -> None:
    reg = CollectorRegistry()
    r = runner(baseline_file, f"http://127.0.0.1:{free_port()}", reg, timeout=3.0)
    res = r.run_once()
    assert res.outcome == "error"
    assert r.passing is False
    assert reg.get_sample_value("vllm_canary_runs_total", {"outcome": "error"}) == 1
