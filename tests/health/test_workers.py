"""Nothing stops silently: a worker loop (log follower, /health poller, canary) that dies turns /readyz 503 with
its reason and is restarted with back-off; one that hangs is reported stuck; a canary pass that is older than
N intervals no longer counts. The Sidecar runs in-process with its real threads and HTTP endpoints; the faults
are put into its own loops (no outside input makes them die)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from vllm_rocm_health import app
from vllm_rocm_health.app import Sidecar
from vllm_rocm_health.canary import CanaryConfig
from vllm_rocm_health.config import SidecarConfig
from vllm_rocm_health.events import EventPoster
from vllm_rocm_health.workers import Worker

from tests.support.canary import make_baseline
from tests.support.injector import AnswererServer, CanaryAnswerer
from tests.support.sidecar import free_port

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_silent_worker_is_stuck_and_a_dead_one_restarts_with_backoff() -> None:
    clock, stop, go = Clock(), threading.Event(), threading.Event()

    def loop(w: Worker) -> None:
        w.beat()
        go.wait(5)
        raise RuntimeError("boom")

    w = Worker("demo", loop, stop, max_silence=10.0, clock=clock)
    w.start()
    assert w.status().up
    clock.now += 11
    s = w.status()
    assert not s.up and "stuck: no progress for 11 s (limit 10 s)" in s.reason
    assert not w.restart_if_dead()  # never a second copy of a live loop
    go.set()
    w.join(5)
    s = w.status()
    assert not s.up and "not running (RuntimeError: boom)" in s.reason
    assert not w.restart_if_dead()  # schedules: first back-off 1 s
    clock.now += 0.5
    assert not w.restart_if_dead()
    clock.now += 0.6
    go.clear()
    assert w.restart_if_dead() and w.restarts == 1 and w.status().up
    go.set()
    w.join(5)
    assert not w.restart_if_dead()
    clock.now += 1.5
    assert not w.restart_if_dead()  # the back-off doubled to 2 s
    clock.now += 0.6
    assert w.restart_if_dead() and w.restarts == 2
    stop.set()
    w.join(5)


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return r.read().decode()


def _wait(pred, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return bool(pred())


@contextlib.contextmanager
def started(
    tmp_path: Path,
    interval: float,
    log_fixture: str = "v0.14.0-eager.log",
    prepare: Callable[[Sidecar], None] = lambda _: None,
) -> Iterator[tuple[Sidecar, str, CanaryAnswerer]]:
    """A Sidecar in-process following a log of health/fixtures, Ready on the fake answerer (a canary pass), canary
    every `interval` s; `prepare` sees it before its threads start."""
    base = make_baseline(seed=7, num_problems=4)
    base.save(tmp_path / "b.json")
    answerer = CanaryAnswerer(base)
    server = AnswererServer(answerer)
    log = tmp_path / "vllm.log"
    log.write_text((FIXTURES / log_fixture).read_text())
    port = free_port()
    cfg = SidecarConfig(
        vllm_url=server.url,
        listen=f"127.0.0.1:{port}",
        log_source=f"file:{log}",
        health_interval=0.2,
        model="m",
        canary=CanaryConfig(
            baseline=str(tmp_path / "b.json"),
            seed=7,
            num_problems=4,
            interval=interval,
            max_age_intervals=2.0,
            timeout=3.0,
            idle_probe_after=0.0,
        ),
    )
    sidecar = Sidecar(cfg, EventPoster(None))
    prepare(sidecar)
    sidecar.start()
    url = f"http://127.0.0.1:{port}"
    try:
        assert _wait(lambda: _get(url + "/readyz")[0] == 200), _get(url + "/readyz")
        yield sidecar, url, answerer
    finally:
        sidecar.shutdown()
        server.close()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Sidecar, str, CanaryAnswerer]]:
    with started(tmp_path, interval=1.0) as s:
        yield s


def test_shutdown_wakes_the_canary_between_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM (`shutdown()`) ends every worker at once, the canary too while it waits for its next run: an hour
    here (interval and heartbeat), so a canary that waited would still be alive after the generous join below."""
    monkeypatch.setattr(app, "CANARY_BEAT", 3600.0)
    sleeping = threading.Event()

    class Wake(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            sleeping.set()
            return super().wait(timeout)

    def prepare(sidecar: Sidecar) -> None:
        sidecar.canary_wake = Wake()

    # An engine that finished starting: the follower's stop at shutdown starts no new instance (which would wake
    # the canary too).
    with started(tmp_path, 3600.0, "v0.14.0-dict-default.log", prepare) as (sidecar, _, _):
        canary = next(w for w in sidecar.supervisor.workers if w.name == "canary")
        assert sleeping.wait(60.0), "the canary never went to sleep after its pass"
        sidecar.shutdown()
        sidecar.supervisor.join(120.0)  # a bound for a loaded machine only: a woken thread ends in milliseconds
        assert [w.name for w in sidecar.supervisor.workers if w.alive()] == []
        assert not canary.alive()


def test_a_dead_log_follower_is_not_ready_then_restarted(running, monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar, url, _ = running
    calls = []

    def crash(line: str) -> None:
        calls.append(line)
        raise RuntimeError("parser bug")

    monkeypatch.setattr(sidecar, "on_line", crash)
    (Path(sidecar.cfg.log_source[5:])).open("a").write("one more line\n")
    assert _wait(lambda: "log worker is not running (RuntimeError: parser bug)" in _get(url + "/readyz")[1]["reason"])
    assert _get(url + "/readyz")[0] == 503
    assert 'vllm_sidecar_worker_up{worker="log"} 0.0' in _metrics(url)
    monkeypatch.undo()  # the bug is gone; the supervisor restarts the follower after its back-off
    assert _wait(lambda: _get(url + "/readyz")[0] == 200)
    m = _metrics(url)
    assert 'vllm_sidecar_worker_restarts_total{worker="log"} 1.0' in m
    assert 'vllm_sidecar_worker_up{worker="log"} 1.0' in m
    assert sidecar.status.log.restarts == 0  # the re-read log is not counted as an engine restart


def test_a_dead_canary_thread_does_not_leave_its_last_pass_standing(running, monkeypatch) -> None:
    sidecar, url, _ = running
    assert sidecar.canary.passing is True

    def crash() -> None:
        raise RuntimeError("canary bug")

    monkeypatch.setattr(sidecar.canary, "run_once", crash)
    assert _wait(lambda: "canary worker is not running" in _get(url + "/readyz")[1]["reason"])
    assert sidecar.canary.passing is True  # the stale pass is still there; readiness does not trust it
    assert 'vllm_sidecar_not_ready_reason{reason="worker_down"} 1.0' in _metrics(url)
    monkeypatch.undo()
    assert _wait(lambda: _get(url + "/readyz")[0] == 200)


def test_a_canary_pass_older_than_n_intervals_no_longer_counts(running, monkeypatch) -> None:
    """The canary thread is alive but never finishes a run: after max_age_intervals * interval the pass is stale."""
    sidecar, url, _ = running
    release = threading.Event()
    real = sidecar.canary.run_once

    def stuck():
        release.wait(30)
        return real()

    monkeypatch.setattr(sidecar.canary, "run_once", stuck)
    t0 = time.monotonic()
    assert _wait(lambda: _get(url + "/readyz")[0] == 503)
    body = _get(url + "/readyz")[1]
    assert "last canary pass is too old" in body["reason"] and "limit 2 s" in body["reason"], body
    assert time.monotonic() - t0 >= 0.5  # it was ready until the pass aged out
    assert 'vllm_sidecar_not_ready_reason{reason="canary_stale"} 1.0' in _metrics(url)
    release.set()
    assert _wait(lambda: _get(url + "/readyz")[0] == 200)


def test_the_canary_backs_off_while_the_server_is_slow(running) -> None:
    sidecar, _, _ = running
    from vllm_rocm_health.canary.runner import CanaryResult

    slow = CanaryResult("error", "timeout", error_kind="timeout")
    periods = [sidecar.next_canary_period(slow) for _ in range(5)]
    # Interval 1 s: a single slow run costs one interval (a load spike keeps the pod out no longer than that after
    # it ends), then doubled, capped at max_backoff_intervals (8).
    assert periods == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert sidecar.next_canary_period(CanaryResult("error", "503", error_kind="http_status", http_status=503)) == 8.0
    assert sidecar.next_canary_period(CanaryResult("pass", "ok")) == 1.0  # and back to the interval
    assert sidecar.next_canary_period(CanaryResult("error", "refused", error_kind="connection")) == 1.0
