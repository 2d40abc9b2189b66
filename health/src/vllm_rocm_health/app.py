"""The sidecar process: log follower, /health poller, canary thread and HTTP endpoints around one shared state."""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

import httpx

from . import k8s_logs, logsource, readiness
from .canary import CanaryResult, CanaryRunner
from .config import SidecarConfig
from .events import EventPoster
from .http_server import serve
from .metrics import SidecarStatus, WorkerCollector, make_registry
from .state import LogState
from .workers import Supervisor, Worker

log = logging.getLogger(__name__)


class Sidecar:
    def __init__(self, cfg: SidecarConfig, event_poster: EventPoster | None = None) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.status = SidecarStatus(LogState(requested_hint=cfg.requested_mode))
        self.registry = make_registry(self.status)
        self.canary = CanaryRunner(cfg.canary, cfg.vllm_url, self.registry, cfg.model or None)
        self.events = event_poster or EventPoster.from_environment(enabled=cfg.events)
        self._last = {"failed": False, "downgraded": False, "canary": None}
        self._slow_runs = 0  # consecutive canary runs that found the server slow (back-off exponent)
        self.supervisor = Supervisor(self._workers(), self.stop)
        self.registry.register(WorkerCollector(self.supervisor.statuses))
        self.http = None

    def _workers(self) -> list[Worker]:
        """Every loop of the sidecar, with how long it may go without progress before it counts as stuck."""
        cfg = self.cfg
        workers = [Worker("health", self._poll_health, self.stop,
                          max_silence=cfg.health_interval + 4 * cfg.health_timeout + 30.0)]
        if cfg.log_source != "none":
            # stdin blocks in read() while vLLM is quiet, which is no fault; files are polled every 0.2 s; the
            # k8s stream times out a quiet read and reconnects.
            silence = {"stdin": None, "k8s": k8s_logs.READ_TIMEOUT + k8s_logs.CONNECT_TIMEOUT + 60.0}
            workers.append(Worker("log", self._follow_log, self.stop,
                                  max_silence=silence.get(cfg.log_source, 30.0)))
        if self.canary.enabled:
            workers.append(Worker("canary", self._run_canary, self.stop,
                                  max_silence=self.canary.max_run_seconds + 30.0))
        return workers

    # -- the log ----------------------------------------------------------------------------------------
    def on_line(self, line: str) -> None:
        with self.status.lock:
            self.status.log_lines += 1
            before = self.status.log.engines_seen
            events = self.status.log.feed(line)
            if self.status.log.engines_seen != before:
                self.status.engine_start_time = time.time()
        if events:  # most lines carry nothing: skip the readiness/transition work for them
            self._transitions()

    def on_container_restart(self) -> None:
        with self.status.lock:
            self.status.log.restart(container=True)
            self.status.engine_start_time = time.time()
        log.warning("the vLLM container restarted")

    def _set_source_up(self, up: bool, reason: str = "") -> None:
        with self.status.lock:
            changed = (up, reason) != (self.status.log_source_up, self.status.log_source_reason)
            self.status.log_source_up, self.status.log_source_reason = up, reason
        if changed and not up and reason:
            log.warning("log source down: %s", reason)  # once per change, not once per poll

    def _lines(self, worker: Worker) -> Iterator[str]:
        src = self.cfg.log_source
        if src.startswith("file:"):
            return logsource.follow_file(src[5:], self.stop, from_start=self.cfg.log_from_start,
                                         on_up=self._set_source_up, beat=worker.beat)
        if src == "stdin":
            self._set_source_up(True)
            return logsource.stdin_lines(self.stop)
        if src == "k8s":
            follower = k8s_logs.PodLogFollower.from_environment(self.cfg.k8s_container,
                                                                on_restart=self.on_container_restart)
            return logsource.retrying(lambda: follower.stream(self.stop), self.stop, self._set_source_up,
                                      beat=worker.beat)
        raise ValueError(f"no log source {src!r}")

    def _follow_log(self, worker: Worker) -> None:
        if worker.restarts and self.cfg.log_source != "stdin":
            # A restarted follower reads the log again from where the first one began: start from a clean state
            # rather than count the same engine twice.
            with self.status.lock:
                self.status.log = LogState(requested_hint=self.cfg.requested_mode)
        try:
            for line in self._lines(worker):
                worker.beat()
                self.on_line(line)
                if self.stop.is_set():
                    break
        finally:
            stdin_closed = self.cfg.log_source == "stdin" and not self.stop.is_set()
            self._set_source_up(False, "stdin was closed" if stdin_closed else "log follower stopped")
        if stdin_closed:
            # The writer closed the pipe: nothing more will come; wait for shutdown (restarting would only read
            # EOF again).
            while not self.stop.wait(1.0):
                worker.beat()

    # -- vLLM /health -----------------------------------------------------------------------------------
    def poll_health_once(self, client: httpx.Client) -> None:
        try:
            ok = client.get(self.cfg.vllm_url.rstrip("/") + "/health").status_code == 200
        except httpx.HTTPError:
            ok = False
        with self.status.lock:
            if ok != self.status.server_healthy:
                log.info("vLLM /health: %s", "ok" if ok else "failing")
            self.status.server_healthy = ok
        self.update_readiness()

    def _poll_health(self, worker: Worker) -> None:
        with httpx.Client(timeout=self.cfg.health_timeout) as client:
            while not self.stop.is_set():
                worker.beat()
                self.poll_health_once(client)
                self.stop.wait(self.cfg.health_interval)

    # -- readiness and transitions ----------------------------------------------------------------------
    def update_readiness(self) -> tuple[bool, str]:
        workers = self.supervisor.statuses()
        canary = self.canary
        with self.status.lock:
            v = readiness.decide(readiness.Inputs(
                engine=self.status.log.engine, server_healthy=self.status.server_healthy,
                capture_gate=self.cfg.log_source != "none", log_source_up=self.status.log_source_up,
                log_source_reason=self.status.log_source_reason, workers=workers,
                canary_enabled=canary.enabled, canary_passing=canary.passing, canary_reason=canary.last_reason,
                canary_pass_age=time.monotonic() - canary.last_pass if canary.last_pass else None,
                canary_max_age=self.cfg.canary.max_pass_age))
            if (v.ready, v.message) != (self.status.ready, self.status.ready_reason):
                log.info("readiness: %s (%s)", "ready" if v.ready else "not ready", v.message)
            self.status.ready, self.status.ready_reason, self.status.ready_code = v.ready, v.message, v.code
        return v.ready, v.message

    def _transitions(self) -> None:
        with self.status.lock:
            e = self.status.log.engine
            failed, downgraded = bool(e.failures), e.downgraded
            msg_fail = ", ".join(sorted(e.failures))
            msg_down = f"cudagraph_mode {e.requested} -> {e.effective} ({e.downgrade_reason or 'capture bars'})"
        if failed and not self._last["failed"]:
            log.error("CUDA-graph capture / engine start failed: %s", msg_fail)
            self.events.post("CudaGraphCaptureFailed", f"capture failed: {msg_fail}", warning=True)
        if downgraded and not self._last["downgraded"]:
            log.warning("mode downgraded: %s", msg_down)
            self.events.post("CudaGraphModeDowngraded", msg_down, warning=True)
        self._last["failed"], self._last["downgraded"] = failed, downgraded
        self.update_readiness()

    def next_canary_period(self, result: CanaryResult) -> float:
        """Seconds from this run's start to the next one's. Start to start: the load stays at one run per interval
        however long a run takes, and wrong answers show within an interval plus one run. A slow server (timeout,
        429/503) gets 2x, 4x, ... the interval, up to max_backoff_intervals: a canary must never pile load onto
        a server that is already behind. Other errors (a server restarting) are looked at again soon."""
        interval = self.cfg.canary.interval
        if result.outcome == "error" and result.server_slow:
            self._slow_runs += 1
            return min(interval * 2 ** self._slow_runs, interval * self.cfg.canary.max_backoff_intervals)
        self._slow_runs = 0
        return min(interval, 10.0) if result.outcome == "error" else interval

    def _run_canary(self, worker: Worker) -> None:
        while not self.stop.is_set():
            # Asking a server that is still starting only produces errors: wait for /health first.
            while not self.stop.is_set() and not self.status.server_healthy:
                worker.beat()
                self.stop.wait(1.0)
            worker.beat()
            started = time.monotonic()
            result = self.canary.run_once()  # never raises: a crash inside is an `error` outcome
            passing = self.canary.passing
            if passing is False and self._last["canary"] is not False:
                self.events.post("CanaryFailed", self.canary.last_reason, warning=True)
            elif passing and self._last["canary"] is False:
                self.events.post("CanaryRecovered", self.canary.last_reason, warning=False)
            self._last["canary"] = passing
            self.update_readiness()
            period = self.next_canary_period(result)
            while not self.stop.is_set():
                worker.beat()
                left = started + period - time.monotonic()
                if left <= 0:
                    break
                self.stop.wait(min(left, 5.0))

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        self.http = serve(self.cfg.listen_addr, self.registry, self.update_readiness)
        log.info("listening on %s:%d (pid %d); vLLM %s; log source %s; canary %s", *self.cfg.listen_addr, os.getpid(),
                 self.cfg.vllm_url, self.cfg.log_source,
                 f"every {self.cfg.canary.interval:.0f} s" if self.canary.enabled else "off (no baseline)")
        self.supervisor.start()

    def shutdown(self) -> None:
        self.stop.set()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        self.supervisor.join(timeout=5.0)
        self.canary.close()
