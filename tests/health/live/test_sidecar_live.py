"""The sidecar process against the REAL vLLM CPU server: it follows the server's own log, reads the real /metrics
(`promtool check metrics` clean), readiness flips on wrong answers (the perturbed model behind the same URL) and
back, and faults put between them by a proxy (connections dropped as while vLLM restarts mid-canary, 5xx, answers
slower than the canary's timeout, a 200 with a body of the wrong shape) are reported as canary errors: never as a
pass, never as wrong answers, and the sidecar keeps running. The proxy forwards unchanged when no fault is set; it
is the failure injector the issue allows, since a real server cannot be told to do these on cue.

Timings come from the `canary_timing` fixture (measured on this machine now), and detection is asserted in canary
runs, not seconds: the tests pass on a busy 2-core machine."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_health.canary import CanaryConfig
from vllm_rocm_stack.proxy import SwitchableProxy
from vllm_rocm_stack.vllm_server import VllmServer

from tests.support.canary import CanaryTiming
from tests.support.sidecar import SidecarProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sidecar(
    proxy: SwitchableProxy,
    vllm_server: VllmServer,
    baseline_file: Path,
    canary_timing: CanaryTiming,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SidecarProcess]:
    t = canary_timing
    sc = SidecarProcess(
        [
            "--vllm-url",
            proxy.url,
            "--log-source",
            f"file:{vllm_server.log_path}",
            "--canary-baseline",
            str(baseline_file),
            "--canary-interval",
            f"{t.interval:.1f}",
            "--canary-timeout",
            f"{t.timeout:.1f}",
            "--canary-max-backoff-intervals",
            "2",
            "--health-interval",
            "0.5",
            "--health-timeout",
            f"{min(t.timeout, 10):.1f}",
        ],
        tmp_path_factory.mktemp("sidecar") / "sidecar.out",
    )
    yield sc
    assert sc.stop() == 0, sc.log_path.read_text()[-3000:]


def runs(sc: SidecarProcess, outcome: str) -> float:
    return sc.total("vllm_canary_runs_total", outcome=outcome)


def wait_ready(sc: SidecarProcess, want: int, timing: CanaryTiming) -> dict:
    assert sc.wait_for(lambda: sc.ready()[0] == want, timing.patience), (sc.ready(), sc.log_path.read_text()[-3000:])
    return sc.ready()[1]


def test_ready_on_the_real_server(sidecar: SidecarProcess, canary_timing: CanaryTiming) -> None:
    body = wait_ready(sidecar, 200, canary_timing)
    assert body == {"ready": True, "reason": "ok"}
    m = sidecar.metrics()
    # From the real server's log: an eager CPU engine, no capture, no failure.
    assert sidecar.value("vllm_engine_eager_mode") == 1, m
    assert sidecar.value("vllm_sidecar_log_source_up") == 1
    assert runs(sidecar, "pass") >= 1 and sidecar.value("vllm_canary_passing") == 1
    assert (sidecar.value("vllm_canary_score_ratio") or 0) >= 0.5
    for worker in ("log", "health", "canary"):
        assert sidecar.total("vllm_sidecar_worker_up", worker=worker) == 1, m
    r = subprocess.run(["promtool", "check", "metrics"], input=m, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("fault", ["down", "5xx", "slow", "malformed"])
def test_faults_mid_canary_are_errors_and_it_recovers(
    sidecar: SidecarProcess, proxy: SwitchableProxy, canary_timing: CanaryTiming, fault: str
) -> None:
    wait_ready(sidecar, 200, canary_timing)
    errors, fails = runs(sidecar, "error"), runs(sidecar, "fail")
    # Strike while a run is in flight: the canary has just sent a completion.
    sent = proxy.count("/v1/completions")
    assert sidecar.wait_for(lambda: proxy.count("/v1/completions") > sent, canary_timing.patience)
    proxy.delay = canary_timing.timeout + 2
    proxy.inject(fault)
    try:
        assert sidecar.wait_for(lambda: runs(sidecar, "error") > errors, canary_timing.patience), (
            sidecar.log_path.read_text()[-3000:]
        )
        assert sidecar.ready()[0] == 503
        assert sidecar.value("vllm_canary_passing") == 0
    finally:
        proxy.inject(None)
    body = wait_ready(sidecar, 200, canary_timing)
    assert body["ready"] is True
    assert runs(sidecar, "fail") == fails, "a fault is not wrong answers"
    assert sidecar.proc.poll() is None


def test_wrong_answers_flip_readiness_and_back(
    sidecar: SidecarProcess,
    proxy: SwitchableProxy,
    vllm_server: VllmServer,
    vllm_perturbed_server: VllmServer,
    canary_timing: CanaryTiming,
) -> None:
    wait_ready(sidecar, 200, canary_timing)
    fails, passes = runs(sidecar, "fail"), runs(sidecar, "pass")
    proxy.switch(vllm_perturbed_server.base_url)
    try:
        body = wait_ready(sidecar, 503, canary_timing)
        assert sidecar.wait_for(lambda: runs(sidecar, "fail") > fails, canary_timing.patience)
        # Detected by the first run that started after the switch: at most the run already in flight passed.
        assert runs(sidecar, "pass") <= passes + 1
        assert "canary fail" in sidecar.ready()[1]["reason"], body
        assert (sidecar.value("vllm_canary_fingerprint_drift") or 0) > CanaryConfig().fingerprint_tolerance
    finally:
        proxy.switch(vllm_server.base_url)
    assert wait_ready(sidecar, 200, canary_timing)["reason"] == "ok"
