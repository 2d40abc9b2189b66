"""The corpus of real GPU logs (health/fixtures/corpus/, issue 29): each log read right by `parse` and by `serve`.

Every case was recorded on a real GPU (tools/gpu/corpus.py: an NVIDIA H200, vLLM 0.22.1, 0.24.0 and 0.26.0, the
five modes on each and the options operators use). Its facts file says what the command line asked for, what
happened (ready, exit), vLLM's own engine config line, and `expect`: what the sidecar must read from the log, written
from the command line and a plain reading of the log text (tools/gpu/README.md), not from the parser under test.

- `parse`: the offline summary of each log (the CLI's code, and the CLI itself once for all logs);
- `serve`: the sidecar itself (in process: the real follower, poller, state and readiness rules) following the log
  file, in front of a /health answerer that says ok (a failure-injection double for /health alone; the logs are
  vLLM's), with the mode the case asked for as `--expected-mode`, gives the readiness verdict of `expect`.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_health.app import Sidecar
from vllm_rocm_health.canary.config import CanaryConfig
from vllm_rocm_health.config import SidecarConfig
from vllm_rocm_health.events import EventPoster
from vllm_rocm_health.state import LogState

from tests.support.injector import FailureInjectingVllmHealth

CORPUS = Path(__file__).resolve().parents[2] / "health" / "fixtures" / "corpus"
CASES = sorted(CORPUS.glob("*/*.facts.json"))
IDS = [f"{p.parent.name}/{p.name[: -len('.facts.json')]}" for p in CASES]
RELEASES = {json.loads(p.read_text())["release"] for p in CASES}


def log_bytes(facts_path: Path) -> bytes:
    case = facts_path.name[: -len(".facts.json")]
    plain, packed = facts_path.with_name(case + ".log"), facts_path.with_name(case + ".log.gz")
    return plain.read_bytes() if plain.exists() else gzip.decompress(packed.read_bytes())


def expect(facts_path: Path) -> dict:
    return json.loads(facts_path.read_text())["expect"]


def test_the_corpus_spans_what_the_issue_asks() -> None:
    """At least 3 releases x the five modes, and every option named once."""
    names = {p.name[: -len(".facts.json")] for p in CASES}
    modes = ("none", "piecewise", "full_decode_only", "full_and_piecewise", "full")
    tags = {r.replace(".", "") for r in RELEASES}
    assert len(tags) >= 3
    assert {f"v{t}-mode-{m}" for t in tags for m in modes} <= names
    for needed in (
        "enforce-eager", "O0", "O3", "attn-flash", "attn-triton", "attn-flex", "kv-fp8", "spec-ngram",
        "max-num-seqs-4", "capture-sizes", "no-prefix-caching", "runner-v1", "runner-v2", "tty", "color",
        "log-requests", "no-access-log", "restart", "capture-oom", "engine-crash", "gpu-util",
    ):  # fmt: skip
        assert any(needed in n for n in names), needed
    for p in CASES:
        facts = json.loads(p.read_text())
        assert facts["argv"] and facts["starts"] and facts["recorded_on"] and "verdict" in facts["expect"], p


def summary(raw: bytes) -> dict:
    state = LogState()
    state.feed_block(raw)
    return state.summary()


def check(s: dict, e: dict) -> None:
    got = {
        "version": s["vllm_version"] if s["engines_seen"] else "",
        "engines": s["engines_seen"],
        "config_mode": s["config_mode"],
        "requested": s["requested_mode"],
        "effective": s["effective_mode"],
        "capture_finished": s["capture_finished"],
        "graphs": s["graphs"],
        "failures": s["failures"],
        "attention_backend": s["attention_backend"],
        "kv_cache_dtype": s["kv_cache_dtype"],
        "speculative_method": s["speculative_method"],
        "max_num_seqs": s["max_num_seqs"],
    }
    want = {k: e[k] for k in got}
    assert got == want


@pytest.mark.parametrize("facts_path", CASES, ids=IDS)
def test_parse_reads_the_log_right(facts_path: Path) -> None:
    check(summary(log_bytes(facts_path)), expect(facts_path))


def test_the_parse_command_reads_every_log(tmp_path: Path) -> None:
    files = []
    for p in CASES:
        f = tmp_path / (p.name[: -len(".facts.json")] + ".log")
        f.write_bytes(log_bytes(p))
        files.append(f)
    r = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_health", "parse", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(lines) == len(CASES)
    for p, s in zip(CASES, lines, strict=True):
        check(s, expect(p))


@pytest.fixture(scope="module")
def health() -> Iterator[FailureInjectingVllmHealth]:
    h = FailureInjectingVllmHealth()
    yield h
    h.close()


GRACE = 1.0  # --log-grace: vLLM answered /health, its lines have been written; the file is read at once


@pytest.mark.parametrize("facts_path", CASES, ids=IDS)
def test_serve_gives_the_verdict_the_rules_give(
    facts_path: Path, health: FailureInjectingVllmHealth, tmp_path: Path
) -> None:
    e = expect(facts_path)
    log = tmp_path / "vllm.log"
    log.write_bytes(log_bytes(facts_path))
    cfg = SidecarConfig(
        vllm_url=health.url,
        log_source=f"file:{log}",
        expected_mode=e["expected_mode"],
        health_interval=0.05,
        log_grace=GRACE,
        kfd_topology=str(tmp_path / "no-kfd"),
        events=False,
        canary=CanaryConfig(enabled=False),
    )
    sidecar = Sidecar(cfg, EventPoster(None))
    lines = log.read_bytes().count(b"\n")
    sidecar.supervisor.start()  # its workers (log follower, /health poller); the verdict is read below, not over HTTP
    try:
        # The whole file is read at once; the verdict is taken once every line was read and /health polled, or
        # when the expected one is a grace's (GRACE) after that. A wrong verdict shows as a timeout with its words.
        deadline = time.monotonic() + 30.0
        while True:
            sidecar.update_readiness()
            with sidecar.status.lock:  # one snapshot: the workers decide readiness too, between any two reads
                st = sidecar.status
                ready, message, code = st.ready, st.ready_reason, st.ready_code
                read_all = st.log_lines >= lines and st.server_healthy is not None
            if (read_all and code == e["verdict"]) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert code == e["verdict"], message
        assert ready is (e["verdict"] == "ok")
    finally:
        sidecar.shutdown()
