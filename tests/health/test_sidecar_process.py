"""The real sidecar process: follows a log file, serves /metrics and /readyz, survives a failing vLLM,
passes `promtool check metrics`, and is scraped by a real Prometheus server."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.prometheus import PrometheusServer, ScrapeTarget

from tests.support.injector import FailureInjectingVllmHealth
from tests.support.sidecar import SidecarProcess, free_port

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"


@pytest.fixture
def fake_vllm() -> Iterator[FailureInjectingVllmHealth]:
    f = FailureInjectingVllmHealth()
    yield f
    f.close()


@pytest.fixture
def sidecar(tmp_path: Path, fake_vllm: FailureInjectingVllmHealth) -> Iterator[tuple[SidecarProcess, Path]]:
    log = tmp_path / "vllm.log"
    log.write_text("")
    sc = SidecarProcess(
        [
            "--vllm-url",
            fake_vllm.url,
            "--log-source",
            f"file:{log}",
            "--health-interval",
            "0.2",
            "--health-timeout",
            "0.5",
            "--no-canary-enabled",
        ],
        tmp_path / "sidecar.log",
    )
    yield sc, log
    assert sc.stop() == 0


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_follows_log_and_gates_readiness(sidecar, fake_vllm) -> None:
    sc, log = sidecar
    # Not ready from the start; first "not connected yet", then, once it follows the (empty) log, waiting for the line.
    assert sc.ready()[0] == 503
    assert sc.wait_for(lambda: "waiting for vLLM's engine config line" in sc.ready()[1]["reason"]), sc.ready()
    assert sc.ready()[0] == 503
    lines = (FIXTURES / "v0.11.0-downgrade-full.log").read_text().splitlines(keepends=True)
    append(log, "".join(lines[:-1]))
    assert sc.wait_for(lambda: sc.value("vllm_cudagraph_mode_downgraded") == 1)
    assert sc.ready()[0] == 503
    append(log, lines[-1])
    assert sc.wait_for(lambda: sc.ready()[0] == 200)
    m = sc.metrics()
    assert 'vllm_cudagraph_mode_info{effective="FULL_AND_PIECEWISE",requested="FULL"} 1.0' in m
    assert 'vllm_cudagraph_graphs_captured{phase="decode",runtime_mode="FULL"} 35.0' in m
    assert sc.value("vllm_cudagraph_capture_duration_seconds") == 14
    assert sc.value("vllm_cudagraph_capture_memory_bytes") == pytest.approx(0.62 * 2**30)
    assert sc.value("vllm_sidecar_ready") == 1
    assert sc.value("vllm_sidecar_log_lines_total") == len(lines)


def test_vllm_failing_or_slow_is_reported_not_fatal(sidecar, fake_vllm) -> None:
    sc, log = sidecar
    append(log, (FIXTURES / "v0.14.0-eager.log").read_text())
    assert sc.wait_for(lambda: sc.ready()[0] == 200)
    fake_vllm.status = 500
    assert sc.wait_for(lambda: sc.ready() == (503, {"ready": False, "reason": "vLLM /health is failing"}))
    fake_vllm.status, fake_vllm.delay = 200, 2.0  # slower than --health-timeout
    # A GET begun after the change timed out, and the sidecar asked again: it has judged a slow answer.
    fake_vllm.wait_requests(2)
    assert sc.ready() == (503, {"ready": False, "reason": "vLLM /health is failing"})
    fake_vllm.delay = 0.0
    assert sc.wait_for(lambda: sc.ready()[0] == 200)
    assert sc.proc.poll() is None


def test_capture_failure_and_rotation(sidecar) -> None:
    sc, log = sidecar
    append(log, (FIXTURES / "v0.11.0-oom-during-capture.log").read_text())
    assert sc.wait_for(lambda: (sc.value('vllm_cudagraph_capture_failures_total{reason="oom"}') or 0) == 1)
    assert "engine start failed" in sc.ready()[1]["reason"]
    # Rotation: the file is replaced; the new engine's lines are read from the new file's start.
    log.rename(log.with_suffix(".1"))
    log.write_text((FIXTURES / "v0.14.0-dict-default.log").read_text())
    assert sc.wait_for(lambda: sc.value("vllm_cudagraph_capture_finished") == 1)
    assert sc.value("vllm_engine_restarts_total") == 1
    # Truncation: read again from the start.
    log.write_text("")
    append(log, (FIXTURES / "v0.14.0-eager.log").read_text())
    assert sc.wait_for(lambda: sc.value("vllm_engine_eager_mode") == 1)


def test_promtool_check_metrics(sidecar) -> None:
    sc, log = sidecar
    append(log, (FIXTURES / "v0.10.2-full-honoured.log").read_text())
    assert sc.wait_for(lambda: sc.value("vllm_cudagraph_capture_finished") == 1)
    res = subprocess.run(["promtool", "check", "metrics"], input=sc.metrics(), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_bad_flags_are_clear(tmp_path: Path) -> None:
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_health", "serve", "--log-source", "syslog"], capture_output=True, text=True
    )
    assert res.returncode == 2 and "use file:PATH, stdin, k8s or none" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_health", "serve", "--expected-mode", "FAST"], capture_output=True, text=True
    )
    assert res.returncode == 2 and "not a cudagraph_mode" in res.stderr
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "serve",
            "--canary-baseline",
            str(tmp_path / "none.json"),
            "--listen",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "not found: record one" in res.stderr


def test_env_vars_configure_it(tmp_path: Path) -> None:
    import os
    import sys

    env = dict(os.environ, VLLM_HEALTH_LOG_SOURCE="bogus")
    res = subprocess.run([sys.executable, "-m", "vllm_rocm_health", "serve"], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "'bogus'" in res.stderr
    env = dict(os.environ, VLLM_HEALTH_CANARY_INTERVAL="abc")
    res = subprocess.run([sys.executable, "-m", "vllm_rocm_health", "serve"], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "VLLM_HEALTH_CANARY_INTERVAL='abc'" in res.stderr


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (make setup installs it)")
def test_real_prometheus_scrapes_the_sidecar(sidecar, tmp_path: Path) -> None:
    sc, log = sidecar
    append(log, (FIXTURES / "v0.14.0-dict-default.log").read_text())
    prom = PrometheusServer(
        tmp_path / "prom",
        free_port(),
        [ScrapeTarget("vllm-rocm-health", f"127.0.0.1:{sc.port}")],
        scrape_interval="1s",
        evaluation_interval="1s",
    )
    prom.start()
    try:
        deadline = time.monotonic() + 20
        result = []
        while time.monotonic() < deadline and not result:
            result = prom.query("vllm_cudagraph_capture_finished == 1")
            time.sleep(0.3)
        assert result, "Prometheus never saw vllm_cudagraph_capture_finished == 1"
        assert prom.targets_health() == {"vllm-rocm-health": "up"}
    finally:
        prom.stop()
