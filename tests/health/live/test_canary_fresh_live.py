"""Fresh questions, the prefix cache and the per-problem history on the REAL vLLM CPU server (issue 30 item 4, issue
35 item 2). The session server runs with vLLM 0.32.0's default prefix caching (on: `enable_prefix_caching=True` in
its own engine config line, asserted below), and vLLM counts its cache on /metrics (`vllm:prefix_cache_queries` and
`vllm:prefix_cache_hits`, in tokens, v1/metrics/loggers.py of 0.32.0):

- repeated canary runs ask fresh problems no earlier run asked, pass on the good model, and no judged prompt is
  answered from a cached prefix (hits do not move while queries do; the same long prompt sent twice without a salt,
  as the canary did before, is a hit: the metric sees what it must);
- a baseline problem answered wrong in two consecutive runs fails the canary although the score stays above the
  threshold, a one-off flip does not: one question of the run is answered by the real perturbed model (the proxy
  diverts that one request), every other by the good one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner, fingerprint, problems
from vllm_rocm_health.canary.baseline import Baseline
from vllm_rocm_stack.proxy import SwitchableProxy

from tests.support.canary import CFG
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.integration


def vllm_counter(url: str, name: str) -> float:
    """The sum of a counter's samples on vLLM's /metrics (one per engine)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(
        s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name + "_total"
    )


class Recording(httpx.HTTPTransport):
    """A real HTTP transport that keeps each JSON request body it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.bodies.append(json.loads(request.read()))
        return super().handle_request(request)


def test_the_session_server_caches_prefixes(vllm_server: VllmServer) -> None:
    lines = vllm_server.log_path.read_text().splitlines()
    config_line = next(line for line in lines if "enable_prefix_caching=" in line)
    assert "enable_prefix_caching=True" in config_line, config_line


def test_runs_ask_fresh_problems_and_hit_no_cached_prefix(baseline_file: Path, vllm_server: VllmServer) -> None:
    url = vllm_server.base_url
    transport = Recording()
    cfg = CanaryConfig(baseline=str(baseline_file), **CFG)  # type: ignore[arg-type]
    runner = CanaryRunner(cfg, url, CollectorRegistry(), transport=transport)
    known = {p.prompt for p in problems.generate(cfg.seed, cfg.num_problems)} | set(fingerprint.REFERENCE_TEXTS)
    fresh_per_run = []
    try:
        for _ in range(3):
            queries, hits = vllm_counter(url, "vllm:prefix_cache_queries"), vllm_counter(url, "vllm:prefix_cache_hits")
            before = len(transport.bodies)
            result = runner.run_once()
            assert result.outcome == "pass", result.reason
            assert result.fresh_score is not None
            assert vllm_counter(url, "vllm:prefix_cache_queries") > queries  # the cache was asked...
            assert vllm_counter(url, "vllm:prefix_cache_hits") == hits  # ...and had nothing for the canary
            asked = [b["prompt"] for b in transport.bodies[before:]]
            fresh_per_run.append({p for p in asked if p not in known and not p.startswith(problems.LONG_TEXT)})
    finally:
        runner.close()
    assert all(len(s) == cfg.fresh_problems for s in fresh_per_run), fresh_per_run
    for a, b in ((0, 1), (1, 2), (0, 2)):
        assert not fresh_per_run[a] & fresh_per_run[b], fresh_per_run
    salts = [b.get("cache_salt") for b in transport.bodies]
    # Every completion of the 3 runs (the /v1/models request of each run aside) carried a salt of its own.
    assert None not in salts and len(set(salts)) == len(salts) == 3 * (cfg.max_requests - 1)
    # Control: the same long prompt twice without a salt (what the canary sent before) is a cache hit.
    long_prompt = problems.long_prompt(problems.long_problems(cfg.seed, 1)[0])
    hits = vllm_counter(url, "vllm:prefix_cache_hits")
    for _ in range(2):
        body = {"model": baseline_model(baseline_file), "prompt": long_prompt, "max_tokens": 1, "temperature": 0}
        assert httpx.post(url + "/v1/completions", json=body, timeout=120).status_code == 200
    assert vllm_counter(url, "vllm:prefix_cache_hits") > hits


def baseline_model(path: Path) -> str:
    return Baseline.load(path).model


def ask(url: str, model: str, prompt: str) -> int | None:
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stop": ["\n"]}
    r = httpx.post(url + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return problems.parse_answer(r.json()["choices"][0]["text"])


def steadily_flipped(base: Baseline, bad_url: str) -> int:
    """A baseline problem (not the first, which is the after-idle probe) that the baseline answered right and the
    perturbed model answers wrong every time it is asked, with a question no other problem of the run asks."""
    todo = problems.generate(base.seed, base.num_problems)
    questions = [p.question for p in todo] + [p.question for p in problems.long_problems(base.seed, base.long_prompts)]
    for i, p in enumerate(todo):
        if i == 0 or base.answers[i] != p.answer or questions.count(p.question) != 1:
            continue
        if all(ask(bad_url, base.model, p.prompt) != p.answer for _ in range(3)):
            return i
    raise AssertionError(f"the perturbed model answers every baseline-right problem right: {base.answers}")


def test_a_steady_wrong_answer_fails_a_one_off_flip_passes(
    baseline_file: Path, proxy: SwitchableProxy, vllm_server: VllmServer, vllm_perturbed_server: VllmServer
) -> None:
    base = Baseline.load(baseline_file)
    i = steadily_flipped(base, vllm_perturbed_server.base_url)
    p = problems.generate(base.seed, base.num_problems)[i]
    needle = json.dumps(p.prompt).encode()  # exactly this prompt as the request's JSON spells it
    cfg = CanaryConfig(baseline=str(baseline_file), **CFG)  # type: ignore[arg-type]
    proxy.switch(vllm_server.base_url)
    try:
        # Steady: the perturbed model answers problem i in two consecutive runs.
        runner = CanaryRunner(cfg, proxy.url, CollectorRegistry())
        proxy.divert(needle, vllm_perturbed_server.base_url)
        first, second = runner.run_once(), runner.run_once()
        runner.close()
        assert proxy.diverted == 2
        assert first.outcome == "pass", first.reason  # one wrong answer: inside the score tolerance
        assert first.answers[i] != p.answer
        assert second.outcome == "fail" and re.search(rf"problem {i} \(.*wrong in 2 of the last 3 runs", second.reason)
        assert second.answers[i] != p.answer
        # The score alone would pass: the history failed it.
        assert second.score is not None and second.score >= runner.threshold and "threshold" not in second.reason
        # A one-off: wrong once, then right.
        runner = CanaryRunner(cfg, proxy.url, CollectorRegistry())
        outcomes = []
        for diverted in (True, False, False):
            proxy.divert(needle if diverted else None, vllm_perturbed_server.base_url)
            outcomes.append(runner.run_once())
        runner.close()
        assert [r.outcome for r in outcomes] == ["pass"] * 3, [r.reason for r in outcomes]
        assert outcomes[0].answers[i] != p.answer and outcomes[1].answers[i] == p.answer
    finally:
        proxy.divert(None)
