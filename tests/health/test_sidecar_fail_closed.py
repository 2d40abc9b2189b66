"""The sidecar process fails closed: answers of the wrong shape, NaN logprobs and stalled answers turn /readyz 503
(never leave an earlier pass standing); out-of-range settings and bad configuration are refused at start naming
the flag or field; every log source holds bounded memory and survives bytes that are not UTF-8.

The server side is the named failure injector of tests/support/injector.py (a real vLLM cannot be told to send
a list where an object belongs, or NaN logprobs); the live tests do the same against the real vLLM CPU server."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.canary import make_baseline
from tests.support.sidecar import SidecarProcess, free_port

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"
SEED, N = 7, 6
CANARY_FLAGS = [
    "--canary-seed",
    str(SEED),
    "--canary-num-problems",
    str(N),
    "--canary-idle-probe-after",
    "0",
    "--model",
    "m",
]


@pytest.fixture
def sidecar(answerer, tmp_path: Path) -> Iterator[SidecarProcess]:
    _, server, path = answerer
    sc = SidecarProcess(
        [
            "--vllm-url",
            server.url,
            "--log-source",
            "none",
            "--canary-baseline",
            str(path),
            "--canary-interval",
            "1",
            "--canary-timeout",
            "3",
            "--health-interval",
            "0.2",
            *CANARY_FLAGS,
        ],
        tmp_path / "sidecar.out",
    )
    yield sc
    assert sc.stop() == 0, sc.log_path.read_text()[-3000:]


def _ready(sc: SidecarProcess, code: int, timeout: float = 30.0) -> dict:
    assert sc.wait_for(lambda: sc.ready()[0] == code, timeout), (sc.ready(), sc.log_path.read_text()[-3000:])
    return sc.ready()[1]


def test_a_body_of_the_wrong_shape_ends_a_standing_pass(sidecar: SidecarProcess, answerer) -> None:
    a, _, _ = answerer
    _ready(sidecar, 200)
    a.override("problem", 200, [{"text": " 7"}])  # HTTP 200, a list where an object belongs
    body = _ready(sidecar, 503)
    assert "canary error" in body["reason"] and "expected a JSON object" in body["reason"], body
    assert sidecar.total("vllm_canary_errors_total", reason="malformed_response") >= 1
    assert sidecar.value("vllm_canary_passing") == 0
    assert sidecar.total("vllm_sidecar_not_ready_reason", reason="canary_failing") == 1
    a.clear()
    assert _ready(sidecar, 200)["reason"] == "ok"
    assert sidecar.proc.poll() is None


def test_nan_logprobs_are_a_fail_not_agreement(sidecar: SidecarProcess, answerer) -> None:
    a, _, _ = answerer
    _ready(sidecar, 200)
    fails = sidecar.total("vllm_canary_runs_total", outcome="fail")
    lps = [None, math.nan, math.nan]
    a.override("fingerprint", 200, {"choices": [{"index": 0, "text": "x", "logprobs": {"token_logprobs": lps}}]})
    body = _ready(sidecar, 503)
    assert "canary fail" in body["reason"] and "drift inf" in body["reason"], body
    assert sidecar.total("vllm_canary_runs_total", outcome="fail") > fails
    assert sidecar.value("vllm_canary_fingerprint_drift") == math.inf


def test_an_answer_that_never_completes_is_a_timeout(sidecar: SidecarProcess, answerer) -> None:
    """Every read is quick, the whole answer never arrives: per-read timeouts alone would hold the canary (and the
    earlier pass) forever. The request deadline makes it an error; the stall is never a `fail`."""
    a, _, _ = answerer
    _ready(sidecar, 200)
    a.drip.add("problem")
    _ready(sidecar, 503)  # first the pass grows stale (3 intervals), then the request deadline ends the run
    assert sidecar.wait_for(lambda: sidecar.total("vllm_canary_errors_total", reason="timeout") >= 1, 30)
    body = sidecar.ready()[1]
    assert not body["ready"] and "canary error" in body["reason"] and "timeout" in body["reason"], body
    assert sidecar.total("vllm_canary_runs_total", outcome="fail") == 0


# -- settings and configuration, refused at start -------------------------------------------------------------
def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_health", "serve", "--listen", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("args", "env", "flag"),
    [
        (["--canary-interval", "1000000000000"], {}, "--canary-interval"),
        (["--canary-interval", "nan"], {}, "--canary-interval"),
        (["--canary-interval", "inf"], {}, "--canary-interval"),
        ([], {"VLLM_HEALTH_CANARY_TIMEOUT": "1e9"}, "--canary-timeout"),
        (["--health-interval", "0"], {}, "--health-interval"),
        (["--health-timeout", "-1"], {}, "--health-timeout"),
        (["--canary-fingerprint-tolerance", "5"], {}, "--canary-fingerprint-tolerance"),
        (["--canary-score-tolerance", "-0.1"], {}, "--canary-score-tolerance"),
        (["--canary-concurrency", "0"], {}, "--canary-concurrency"),
        (["--canary-max-requests", "3"], {}, "--canary-max-requests"),
        (["--canary-max-age-intervals", "0.5"], {}, "--canary-max-age-intervals"),
    ],
)
def test_out_of_range_settings_are_refused_at_start(args: list[str], env: dict[str, str], flag: str) -> None:
    r = serve(*args, env=env)
    assert r.returncode == 2, r.stderr
    assert flag in r.stderr and "must be a number from" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::1", "not a URL"),
        ("ftp://vllm:8000", "expected http"),
        ("localhost:8000", "expected http"),
        ("http://", "expected http"),
    ],
)
def test_a_malformed_vllm_url_is_refused_at_start(url: str, why: str) -> None:
    r = serve("--vllm-url", url)
    assert r.returncode == 2 and "--vllm-url" in r.stderr and why in r.stderr, r.stderr


def test_bad_log_paths_are_named(tmp_path: Path) -> None:
    r = serve("--log-source", f"file:{tmp_path}/no-such-dir/vllm.log")
    assert r.returncode == 2 and "does not exist" in r.stderr, r.stderr
    r = serve("--log-source", f"file:{tmp_path}")
    assert r.returncode == 2 and "is a directory" in r.stderr, r.stderr


def test_an_unreadable_log_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret.log"
    secret.write_text("x\n")
    secret.chmod(0)
    if os.geteuid() != 0:
        r = serve("--log-source", f"file:{secret}")
        assert r.returncode == 2 and "not readable" in r.stderr, r.stderr
    # Root reads any file (CI runs as root): the same check with open() refusing, in-process.
    from vllm_rocm_health import config as cfgmod
    from vllm_rocm_health import logsource

    def refuse(*a: object, **k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(logsource, "open", refuse, raising=False)
    with pytest.raises(ValueError, match="secret.log is not readable: Permission denied"):
        cfgmod.validate(cfgmod.SidecarConfig(log_source=f"file:{secret}"))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"score": "0.75"}, "score"),
        ({"score": -1.0}, "score"),
        ({"num_problems": "6"}, "num_problems"),
        ({"fingerprints": "none"}, "fingerprints"),
    ],
)
def test_a_baseline_of_wrong_types_is_refused_at_start_naming_the_field(
    tmp_path: Path, change: dict, field: str
) -> None:
    import json

    raw = json.loads(json.dumps(make_baseline(seed=SEED, num_problems=N).__dict__))
    raw.update(change)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(raw))
    r = serve("--canary-baseline", str(path), *CANARY_FLAGS)
    assert r.returncode == 1, r.stderr
    assert f"baseline {path}: {field}" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_log_file_that_is_not_there_yet_is_a_readiness_reason(tmp_path: Path, answerer) -> None:
    _, server, _ = answerer
    log = tmp_path / "vllm.log"
    sc = SidecarProcess(
        ["--vllm-url", server.url, "--log-source", f"file:{log}", "--health-interval", "0.2", "--no-canary-enabled"],
        tmp_path / "sidecar.out",
    )
    try:
        assert sc.wait_for(lambda: "does not exist (yet)" in sc.ready()[1]["reason"], 20), sc.ready()
        assert sc.ready()[0] == 503
        assert sc.total("vllm_sidecar_not_ready_reason", reason="log_source_down") == 1
        time.sleep(1.0)  # many polls of the missing file...
        assert sc.log_path.read_text().count("log source down: ") == 1  # ...one log line
        log.write_text((FIXTURES / "v0.14.0-eager.log").read_text())
        assert sc.wait_for(lambda: sc.ready()[0] == 200, 20), sc.ready()
    finally:
        assert sc.stop() == 0


# -- log sources hold bounded memory ----------------------------------------------------------------------------
def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_stdin_bounded_memory_and_undecodable_bytes(tmp_path: Path, answerer) -> None:
    """A 50 MB line without a newline is cut at 1 MiB, not held whole; bytes that are not UTF-8, under a strict
    UTF-8 stdin, are replaced rather than killing the follower: the eager engine after them is still seen."""
    _, server, _ = answerer
    port = free_port()
    out = (tmp_path / "sidecar.out").open("wb")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8", "PYTHONUTF8": "0"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--vllm-url",
            server.url,
            "--log-source",
            "stdin",
            "--health-interval",
            "0.2",
            "--no-canary-enabled",
        ],
        stdin=subprocess.PIPE,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        assert proc.stdin is not None
        block = b"x" * (1 << 20)
        for _ in range(50):
            proc.stdin.write(block)
        proc.stdin.write(b"\n\xff\xfe\xfa not utf-8 \xc3\n")
        proc.stdin.write((FIXTURES / "v0.14.0-eager.log").read_bytes())
        proc.stdin.flush()
        sc_url = f"http://127.0.0.1:{port}"
        from tests.support.sidecar import get

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and get(sc_url + "/readyz")[0] != 200:
            assert proc.poll() is None, (tmp_path / "sidecar.out").read_text()[-2000:]
            time.sleep(0.2)
        assert get(sc_url + "/readyz")[0] == 200, get(sc_url + "/readyz")
        metrics = get(sc_url + "/metrics")[1].decode()
        assert 'vllm_sidecar_worker_up{worker="log"} 1.0' in metrics
        assert "vllm_engine_eager_mode 1.0" in metrics
        peak = _peak_rss_mib(proc.pid)
        # The sidecar itself is ~35 MiB; holding the 50 MB line (plus its decoded copy) would be 100+ MiB.
        assert peak < 75, f"peak RSS {peak:.0f} MiB"
    finally:
        proc.terminate()
        proc.wait(10)
        out.close()
