"""The sidecar process: log follower, /health poller, canary thread and HTTP endpoints around one shared state."""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

import httpx

from . import logsource, readiness
from .canary import CanaryRunner
from .config import SidecarConfig
from .events import EventPoster
from .http_server import serve
from .metrics import SidecarStatus, make_registry
from .state import LogState

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
        self.http = None

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

    def _set_source_up(self, up: bool) -> None:
        with self.status.lock:
            self.status.log_source_up = up

    def _lines(self) -> Iterator[str]:
        src = self.cfg.log_source
        if src.startswith("file:"):
            return logsource.follow_file(src[5:], self.stop, from_start=self.cfg.log_from_start,
                                         on_up=self._set_source_up)
        if src == "stdin":
            self._set_source_up(True)
            return logsource.stdin_lines(self.stop)
        if src == "k8s":
            from .k8s_logs import PodLogFollower

            follower = PodLogFollower.from_environment(self.cfg.k8s_container, on_restart=self.on_container_restart)
            return logsource.retrying(lambda: follower.stream(self.stop), self.stop, self._set_source_up)
        return iter(())

    def _follow_log(self) -> None:
        try:
            for line in self._lines():
                self.on_line(line)
                if self.stop.is_set():
                    break
        except Exception:
            log.exception("log follower crashed")
        finally:
            self._set_source_up(False)

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

    def _poll_health(self) -> None:
        with httpx.Client(timeout=self.cfg.health_timeout) as client:
            while not self.stop.is_set():
                self.poll_health_once(client)
                self.stop.wait(self.cfg.health_interval)

    # -- readiness and transitions ----------------------------------------------------------------------
    def update_readiness(self) -> tuple[bool, str]:
        with self.status.lock:
            ok, reason = readiness.decide(self.status.log.engine, self.status.server_healthy, self.canary.enabled,
                                          self.canary.passing, self.canary.last_reason,
                                          capture_gate=self.cfg.log_source != "none")
            if (ok, reason) != (self.status.ready, self.status.ready_reason):
                log.info("readiness: %s (%s)", "ready" if ok else "not ready", reason)
            self.status.ready, self.status.ready_reason = ok, reason
        return ok, reason

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

    def _run_canary(self) -> None:
        while not self.stop.is_set():
            # Asking a server that is still starting only produces errors: wait for /health first.
            while not self.stop.is_set() and not self.status.server_healthy:
                self.stop.wait(1.0)
            started = time.monotonic()
            outcome = "error"
            try:
                outcome = self.canary.run_once().outcome
            except Exception:
                log.exception("canary run crashed")
            passing = self.canary.passing
            if passing is False and self._last["canary"] is not False:
                self.events.post("CanaryFailed", self.canary.last_reason, warning=True)
            elif passing and self._last["canary"] is False:
                self.events.post("CanaryRecovered", self.canary.last_reason, warning=False)
            self._last["canary"] = passing
            self.update_readiness()
            # Start to start, not end to start: the load stays at one run per interval however long a run takes,
            # and wrong answers show within an interval plus one run. After an error (server restarting,
            # timeout) look again soon rather than a whole interval later.
            period = min(self.cfg.canary.interval, 10.0) if outcome == "error" else self.cfg.canary.interval
            self.stop.wait(max(0.0, started + period - time.monotonic()))

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        self.http = serve(self.cfg.listen_addr, self.registry, self.update_readiness)
        log.info("listening on %s:%d (pid %d); vLLM %s; log source %s; canary %s", *self.cfg.listen_addr, os.getpid(),
                 self.cfg.vllm_url, self.cfg.log_source,
                 f"every {self.cfg.canary.interval:.0f} s" if self.canary.enabled else "off (no baseline)")
        for name, target in (("log", self._follow_log), ("health", self._poll_health)):
            threading.Thread(target=target, name=name, daemon=True).start()
        if self.canary.enabled:
            threading.Thread(target=self._run_canary, name="canary", daemon=True).start()

    def shutdown(self) -> None:
        self.stop.set()
        self.canary.close()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
