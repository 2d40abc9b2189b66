"""The sidecar as the authority, against REAL vLLM CPU servers (issue 18):

- client text that ends up in vLLM's log (request paths in uvicorn's access lines, headers, and with
  `--enable-log-requests` the stop strings and prompts of each request) never counts as an engine event: real
  requests that carry engine-like text change nothing;
- the engine restarts behind the same log file and URL (vLLM stopped, started again on the same port): the old
  canary pass does not vouch for the new engine, /readyz is 503 until the canary has passed on it, and that run
  comes at once, not at the canary's interval (an hour here);
- the cudagraph mode vLLM's own engine line shows is compared with the one the deployment asked for.

Timings come from the measured canary run (`canary_timing`); nothing waits for a fixed number of seconds."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.vllm_server import VllmServer

from tests.support import tiers
from tests.support.canary import CanaryTiming
from tests.support.sidecar import SidecarProcess
from tests.support.vllm_server import GOOD_MODEL, free_port

pytestmark = pytest.mark.integration

# Engine-like text a client controls: each line would be an engine event if the sidecar matched it anywhere.
FORGED = [
    "(EngineCore_DP0 pid=1) INFO 12-02 11:00:00 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: "
    'compilation_config={"cudagraph_mode":2}',
    "(EngineCore_DP0 pid=1) ERROR 12-02 11:00:00 [core.py:700] EngineCore failed to start.",
    "RuntimeError: HIP error: an illegal memory access was encountered",
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 GiB",
    "Traceback (most recent call last):",
    "Capturing CUDA graphs (mixed prefill-decode, FULL):  10%|#| 4/35 [00:01<00:07]",
    'vllm-rocm facts: {"patches": [], "rocm": "7.2.0", "arch": "gfx950"}',
    "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x2. Reason: Page not present",
]


@pytest.fixture(scope="module")
@tiers.needs("integration", "starts a vLLM CPU server of its own")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, list[VllmServer]]]:
    """A vLLM server of this module's own (the session's servers must not restart under other tests), with request
    logging on. The list holds every server started on the port; all are stopped at the end, whatever happened."""
    if not (GOOD_MODEL / "config.json").exists():
        pytest.skip("run `make setup-vllm` (make test does it)")
    port, log = free_port(), tmp_path_factory.mktemp("restart") / "vllm.log"
    servers: list[VllmServer] = []
    try:
        yield port, log, servers
    finally:
        for s in servers:
            s.stop()


def start_server(port: int, log: Path, servers: list[VllmServer]) -> VllmServer:
    s = VllmServer(GOOD_MODEL, "smollm2-135m-instruct", port, log, extra_args=["--enable-log-requests"])
    servers.append(s)
    s.start(timeout=600)
    return s


def request(url: str, body: dict | None = None, headers: dict[str, str] | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def counts(sc: SidecarProcess) -> dict[str, float]:
    return {
        name: sc.total(name)
        for name in (
            "vllm_engine_instances_total",
            "vllm_engine_restarts_total",
            "vllm_cudagraph_capture_failures_total",
            "vllm_canary_runs_total",
        )
    }


@pytest.mark.timeout(1500)  # two real vLLM starts and several canary runs: minutes on a busy machine
def test_client_text_in_the_log_changes_nothing_and_a_restart_needs_a_new_pass(
    restartable, baseline_file: Path, canary_timing: CanaryTiming, tmp_path: Path
) -> None:
    port, log, servers = restartable
    server = start_server(port, log, servers)
    t = canary_timing
    sc = SidecarProcess(
        [
            "--vllm-url",
            server.base_url,
            "--log-source",
            f"file:{log}",
            "--canary-baseline",
            str(baseline_file),
            "--expected-mode",
            "NONE",
            "--canary-interval",
            "3600",
            "--canary-timeout",
            f"{t.timeout:.1f}",
            "--health-interval",
            "0.5",
            "--health-timeout",
            f"{min(t.timeout, 10):.1f}",
        ],
        tmp_path / "sidecar.out",
    )
    try:
        assert sc.wait_for(lambda: sc.ready()[0] == 200, t.patience), (sc.ready(), sc.log_path.read_text()[-3000:])
        before = counts(sc)
        # Real requests whose path, headers, stop strings and prompt carry engine lines.
        for text in FORGED:
            request(server.base_url + "/" + urllib.parse.quote(text))
            request(
                server.base_url + "/v1/completions",
                {
                    "model": "smollm2-135m-instruct",
                    "prompt": "\n" + "\n".join(FORGED) + "\n" + text,
                    "max_tokens": 2,
                    "stop": ["\n" + text, text],
                },
                headers={"X-Forwarded-For": text[:200]},
            )
        size = log.stat().st_size
        # The sidecar has read the log past the last forged request...
        assert sc.wait_for(
            lambda: sc.total("vllm_sidecar_log_lines_total") >= log.read_bytes()[:size].count(b"\n"), t.patience
        )
        text = log.read_text()
        assert "Received request" in text and "HIP error" in text  # the forged text did reach the log
        # ...and nothing changed: no new engine, no failure, still ready on the same pass.
        after = counts(sc)
        assert after["vllm_engine_instances_total"] == before["vllm_engine_instances_total"], (before, after)
        assert after["vllm_engine_restarts_total"] == 0 and after["vllm_cudagraph_capture_failures_total"] == 0
        assert sc.ready() == (200, {"ready": True, "reason": "ok"})

        # The engine restarts behind the same log and URL.
        runs = after["vllm_canary_runs_total"]
        server.stop()
        assert sc.wait_for(lambda: sc.ready()[0] == 503, t.patience)
        start_server(port, log, servers)
        assert sc.wait_for(lambda: sc.total("vllm_engine_restarts_total") == 1, t.patience), sc.log_path.read_text()[
            -3000:
        ]
        # Back in service only with a pass on the new engine, which came long before the hour-long interval.
        assert sc.wait_for(lambda: sc.ready()[0] == 200, t.patience), (sc.ready(), sc.log_path.read_text()[-3000:])
        assert sc.total("vllm_canary_runs_total") > runs
        assert sc.total("vllm_engine_instances_total") > after["vllm_engine_instances_total"]
    finally:
        assert sc.stop() == 0, sc.log_path.read_text()[-3000:]


def test_a_mode_other_than_the_expected_one_is_not_ready(
    vllm_server: VllmServer, baseline_file: Path, canary_timing: CanaryTiming, tmp_path: Path
) -> None:
    """The chart asked for FULL_AND_PIECEWISE; the real engine line says NONE (eager, as a wrapper could make it)."""
    sc = SidecarProcess(
        [
            "--vllm-url",
            vllm_server.base_url,
            "--log-source",
            f"file:{vllm_server.log_path}",
            "--canary-baseline",
            str(baseline_file),
            "--expected-mode",
            "FULL_AND_PIECEWISE",
            "--canary-interval",
            "3600",
            "--canary-timeout",
            f"{canary_timing.timeout:.1f}",
            "--health-interval",
            "0.5",
        ],
        tmp_path / "sidecar.out",
    )
    try:
        assert sc.wait_for(
            lambda: (
                "mode_mismatch" in sc.metrics()
                and sc.total("vllm_sidecar_not_ready_reason", reason="mode_mismatch") == 1
            ),
            canary_timing.patience,
        ), sc.ready()
        code, body = sc.ready()
        assert code == 503 and "vLLM runs cudagraph_mode NONE" in body["reason"], body
    finally:
        assert sc.stop() == 0
