"""The canary against the REAL vLLM CPU server (SmolLM2-135M-Instruct, eager): baseline, pass, stable
fingerprint, mixed traffic + idle probe, failure on a perturbed model, errors when the server is down."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner

from tests.support.vllm_server import VllmServer, free_port

pytestmark = pytest.mark.live

# Small but real: 8 problems + 2 long prompts + 3 fingerprint texts per run (~13 requests).
CFG = dict(num_problems=8, max_requests=16, long_prompts=2, concurrency=4, max_tokens=8, timeout=60.0,
           idle_probe_after=0.0)


@pytest.fixture(scope="module")
def baseline_file(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recorded through the real CLI, as an operator would."""
    out = tmp_path_factory.mktemp("baseline") / "baseline.json"
    r = subprocess.run([sys.executable, "-m", "vllm_rocm_health", "baseline", "record", "--out", str(out),
                        "--vllm-url", vllm_server.base_url, "--num-problems", str(CFG["num_problems"]),
                        "--notes", "smollm2 bf16 eager cpu"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return out


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
    assert res.drift is not None and res.drift > CFG.get("fingerprint_tolerance", 0.05)
    assert r.passing is False
    assert "drift" in r.last_reason


def test_server_down_is_an_error_not_a_crash(baseline_file: Path) -> None:
    reg = CollectorRegistry()
    r = runner(baseline_file, f"http://127.0.0.1:{free_port()}", reg, timeout=3.0)
    res = r.run_once()
    assert res.outcome == "error"
    assert r.passing is False
    assert reg.get_sample_value("vllm_canary_runs_total", {"outcome": "error"}) == 1
