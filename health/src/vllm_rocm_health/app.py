"""The sidecar process: log follower, /health poller, canary thread and HTTP endpoints around one shared state."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from prometheus_client import Counter
from vllm_rocm_core import qualification

from . import direct_http, k8s_logs, logparse, logsource, readiness
from .canary import CanaryResult, CanaryRunner
from .canary.baseline import Baseline
from .config import SidecarConfig, allow_list
from .events import EventPoster
from .http_server import HealthServer, serve
from .known_issues import KnownIssueJudge
from .metrics import SidecarStatus, WorkerCollector, make_registry
from .state import LogState
from .workers import Supervisor, Worker

log = logging.getLogger(__name__)
# The longest the canary worker sleeps between runs without a heartbeat (its stuck check allows a run plus 30 s).
CANARY_BEAT = 5.0


class Sidecar:
    def __init__(
        self, cfg: SidecarConfig, event_poster: EventPoster | None = None, judge: KnownIssueJudge | None = None
    ) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.status = SidecarStatus(LogState())
        # The known issues are judged on every readiness decision: data that cannot be read is a start error.
        self.judge = judge if judge is not None else KnownIssueJudge()
        if self.judge.error:
            raise RuntimeError(f"known issues: {self.judge.error}")
        seen = self.judge.observe_gpu(cfg.kfd_topology)
        log.info("GPU architecture: %s", seen.arch or f"not observed ({seen.detail})")
        self.allow = allow_list(cfg)
        unknown = self.judge.unknown_ids(self.allow)
        if unknown:
            raise RuntimeError(f"--allow-known-issues: {', '.join(unknown)} not in the known-issues data")
        self.qualification: qualification.Report | None = None
        self.expected_mode = cfg.expected_mode
        report_baseline, self.failed_modes, self.passed_modes = self._qualification()
        self.registry = make_registry(self.status, self.judge)
        self.canary = CanaryRunner(cfg.canary, cfg.vllm_url, self.registry, cfg.model or None, baseline=report_baseline)
        # The engine instance the last canary pass was measured on; a pass on an older one does not count.
        self.canary_pass_instance: int | None = None
        self.canary_wake = threading.Event()  # a new engine instance: run the canary now, not at the interval
        self._instance_seen = 0
        self.events = event_poster or EventPoster.from_environment(enabled=cfg.events)
        self._last = {"failed": False, "downgraded": False, "canary": None}
        self._slow_runs = 0  # consecutive canary runs that found the server slow (back-off exponent)
        self.supervisor = Supervisor(self._workers(), self.stop)
        self.registry.register(WorkerCollector(self.supervisor.statuses))
        self.http: HealthServer | None = None
        self.http_dropped = Counter(
            "vllm_sidecar_http_connections_dropped",
            "Connections to these endpoints closed without an answer: over the connection cap (the oldest waiting "
            "one goes), or no complete request in time",
            registry=self.registry,
        )

    def _qualification(self) -> tuple[Baseline | None, frozenset[str], frozenset[str] | None]:
        """The baseline a qualification report carries (when no --canary-baseline is given), the modes it failed and
        those it passed (None without a report). Read with the same rules as `qualification apply`; a report that
        refuses the expected mode stops the start."""
        path = self.cfg.qualification
        if not path:
            return None, frozenset(), None
        try:
            report = qualification.load(Path(path))
            chosen = report.choose_mode(self.cfg.expected_mode)
            report.check_served_model(self.cfg.model)
        except qualification.QualificationError as e:
            raise RuntimeError(f"--qualification: {e}") from e
        self.qualification = report
        if not self.expected_mode and self.cfg.log_source != "none":
            # No mode named: the deployment runs the report's recommendation (what `qualification apply` and the chart
            # deploy when no mode is named), so that is the mode vLLM's config line must show.
            self.expected_mode = chosen
            log.info("--qualification %s: expecting its recommended cudagraph_mode %s", path, chosen)
        failed = frozenset(r["mode"] for r in report.rows if r["verdict"] != "pass")
        passed = frozenset(r["mode"] for r in report.rows if r["verdict"] == "pass")
        base = None
        if self.cfg.canary.enabled and not self.cfg.canary.baseline:
            if report.baseline is None:
                raise RuntimeError(
                    f"--qualification {path}: the report carries no canary baseline; pass --canary-baseline"
                )
            base = Baseline.from_raw(report.baseline, f"--qualification {path}: baseline")
        return base, failed, passed

    def _workers(self) -> list[Worker]:
        """Every loop of the sidecar, with how long it may go without progress before it counts as stuck."""
        cfg = self.cfg
        workers = [
            Worker(
                "health", self._poll_health, self.stop, max_silence=cfg.health_interval + 4 * cfg.health_timeout + 30.0
            )
        ]
        if cfg.log_source != "none":
            # stdin blocks in read() while vLLM is quiet, which is no fault; files are polled every 0.2 s; the
            # k8s stream times out a quiet read and reconnects.
            silence = {"stdin": None, "k8s": k8s_logs.READ_TIMEOUT + k8s_logs.CONNECT_TIMEOUT + 60.0}
            workers.append(Worker("log", self._follow_log, self.stop, max_silence=silence.get(cfg.log_source, 30.0)))
        if self.canary.enabled:
            workers.append(
                Worker("canary", self._run_canary, self.stop, max_silence=self.canary.max_run_seconds + 30.0)
            )
        return workers

    # -- the log ----------------------------------------------------------------------------------------
    def on_line(self, line: str) -> None:
        # Parsed outside the lock: /readyz and /metrics take it, and must never wait for a long line.
        parsed, events = logparse.parse(line)
        with self.status.lock:
            self.status.log_lines += 1
            if parsed is None:
                return
            before = self.status.log.engines_seen
            self.status.log.feed_parsed(parsed, events)
            if self.status.log.engines_seen != before:
                self.status.engine_start_time = time.time()
        self._check_instance()
        if events:  # most lines carry nothing: skip the readiness/transition work for them
            self._transitions()

    def new_instance(self, reason: str) -> None:
        """Something the log cannot show made the server a different one (a /health outage, a lost log during
        start): a canary pass measured before it does not vouch for what answers now."""
        with self.status.lock:
            self.status.log.new_instance(reason)
        self._check_instance()

    def _check_instance(self) -> None:
        with self.status.lock:
            instance, reason = self.status.log.instance, self.status.log.instance_reason
        if instance != self._instance_seen:
            self._instance_seen = instance
            with self.status.lock:
                # The grace for this instance's log lines starts at its own first good /health answer.
                self.status.healthy_since = time.monotonic() if self.status.server_healthy else None
            log.info("engine instance %d: %s", instance, reason)
            self.canary_wake.set()
            self.update_readiness()

    def on_container_restart(self) -> None:
        with self.status.lock:
            self.status.log.restart(container=True)
            self.status.engine_start_time = time.time()
        log.warning("the vLLM container restarted")
        self._check_instance()

    def _set_source_up(self, up: bool, reason: str = "") -> None:
        with self.status.lock:
            changed = (up, reason) != (self.status.log_source_up, self.status.log_source_reason)
            lost = self.status.log_source_up and not up
            starting = self.status.log.engines_seen and not self.status.log.engine.capture_finished
            self.status.log_source_up, self.status.log_source_reason = up, reason
        if changed and not up and reason:
            log.warning("log source down: %s", reason)  # once per change, not once per poll
        if lost and starting:
            self.new_instance(f"the log was lost while the engine started ({reason or 'source down'})")

    def _lines(self, worker: Worker) -> Iterator[str]:
        src = self.cfg.log_source
        if src.startswith("file:"):
            return logsource.follow_file(
                src[5:], self.stop, from_start=self.cfg.log_from_start, on_up=self._set_source_up, beat=worker.beat
            )
        if src == "stdin":
            self._set_source_up(True)
            return logsource.stdin_lines(self.stop)
        if src == "k8s":
            follower = k8s_logs.PodLogFollower.from_environment(
                self.cfg.k8s_container, on_restart=self.on_container_restart
            )
            return logsource.retrying(
                lambda: follower.stream(self.stop), self.stop, self._set_source_up, beat=worker.beat
            )
        raise ValueError(f"no log source {src!r}")

    def _follow_log(self, worker: Worker) -> None:
        if worker.restarts and self.cfg.log_source != "stdin":
            # A restarted follower reads the log again from where the first one began: start from a clean state
            # rather than count the same engine twice.
            with self.status.lock:
                self.status.log = LogState()
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
            outage = self.status.server_healthy is True and not ok
            self.status.server_healthy = ok
            if not ok:
                self.status.healthy_since = None
            elif self.status.healthy_since is None:
                self.status.healthy_since = time.monotonic()
        if outage:
            self.new_instance("vLLM /health failed")
        self.update_readiness()

    def _poll_health(self, worker: Worker) -> None:
        with direct_http.client(timeout=self.cfg.health_timeout) as client:
            while not self.stop.is_set():
                worker.beat()
                self.poll_health_once(client)
                self.stop.wait(self.cfg.health_interval)

    # -- readiness and transitions ----------------------------------------------------------------------
    def update_readiness(self) -> tuple[bool, str]:
        workers = self.supervisor.statuses()
        canary = self.canary
        with self.status.lock:
            state = self.status.log
            ki_error, blocking = self.judge.blocking(state, self.allow)
            undecided = () if ki_error or blocking else tuple(self.judge.arch_undecided(state, self.allow))
            v = readiness.decide(
                readiness.Inputs(
                    engine=self.status.log.engine,
                    server_healthy=self.status.server_healthy,
                    capture_gate=self.cfg.log_source != "none",
                    log_source_up=self.status.log_source_up,
                    log_source_reason=self.status.log_source_reason,
                    workers=workers,
                    canary_enabled=canary.enabled,
                    canary_passing=canary.passing,
                    canary_reason=canary.last_reason,
                    canary_pass_age=time.monotonic() - canary.last_pass if canary.last_pass else None,
                    canary_max_age=self.cfg.canary.max_pass_age,
                    engine_seen=bool(state.engines_seen),
                    instance=state.instance,
                    instance_reason=state.instance_reason,
                    canary_pass_instance=self.canary_pass_instance,
                    expected_mode=self.expected_mode,
                    failed_modes=self.failed_modes,
                    passed_modes=self.passed_modes,
                    healthy_for=time.monotonic() - self.status.healthy_since
                    if self.status.healthy_since is not None
                    else None,
                    log_grace=self.cfg.log_grace,
                    qualification=self.qualification,
                    gpu_product=self.cfg.gpu_product,
                    known_issues_error=ki_error,
                    blocking_issues=tuple(blocking),
                    arch_undecided=undecided,
                    gpu_detail=self.judge.observed.detail if self.judge.observed else "",
                )
            )
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
        429/503) is asked again after one interval, then 2x, 4x, ... up to max_backoff_intervals: a canary must
        never pile load onto a server that stays behind, and one load spike must not keep the pod out for more
        than an interval after it ends. Other errors (a server restarting) are looked at again soon."""
        interval = self.cfg.canary.interval
        if result.outcome == "error" and result.server_slow:
            self._slow_runs += 1
            return min(interval * 2 ** (self._slow_runs - 1), interval * self.cfg.canary.max_backoff_intervals)
        self._slow_runs = 0
        return min(interval, 10.0) if result.outcome == "error" else interval

    def _canary_may_ask(self) -> bool:
        """vLLM answers /health and its graphs are captured (or it runs without them): asking earlier only
        measures a server that is not the one that will serve."""
        with self.status.lock:
            e = self.status.log.engine
            captured = self.cfg.log_source == "none" or e.capture_finished or e.runs_without_graphs
            return bool(self.status.server_healthy) and captured and not e.failures

    def _run_canary(self, worker: Worker) -> None:
        while not self.stop.is_set():
            while not self.stop.is_set() and not self._canary_may_ask():
                worker.beat()
                self.stop.wait(1.0)
            worker.beat()
            self.canary_wake.clear()
            with self.status.lock:
                instance = self.status.log.instance
            started = time.monotonic()
            result = self.canary.run_once()  # never raises: a crash inside is an `error` outcome
            with self.status.lock:
                same = self.status.log.instance == instance
            if result.outcome == "pass" and same:
                self.canary_pass_instance = instance
            elif result.outcome == "pass":
                log.warning("canary pass discarded: the engine instance changed during the run")
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
                if left <= 0 or (self.canary_wake.is_set() and not self._slow_runs):
                    # Due, or a new engine instance whose pass must come now; but a server the last run found slow
                    # keeps its back-off (it stays not ready meanwhile: the old pass no longer counts).
                    break
                self.canary_wake.wait(min(left, CANARY_BEAT))

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.canary.enabled:
            log.warning(
                "the accuracy canary is switched off (--no-canary-enabled): wrong tokens with HTTP 200 will "
                "NOT be caught; vllm_canary_configured is 0 and VllmCanaryNotConfigured fires"
            )
        direct_http.isolate(os.environ)
        self.http = serve(self.cfg.listen_addr, self.registry, self.update_readiness, self.http_dropped.inc)
        log.info(
            "listening on %s:%d (pid %d); vLLM %s; log source %s; canary %s",
            *self.cfg.listen_addr,
            os.getpid(),
            self.cfg.vllm_url,
            self.cfg.log_source,
            f"every {self.cfg.canary.interval:.0f} s" if self.canary.enabled else "OFF",
        )
        self.supervisor.start()

    def shutdown(self) -> None:
        self.stop.set()
        # The canary sleeps on its wake event between runs (up to CANARY_BEAT s), not on `stop`: wake it, or a
        # SIGTERM waits out that sleep (a pod's grace period; every test that stops a sidecar).
        self.canary_wake.set()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        self.supervisor.join(timeout=5.0)
        # A canary run still in flight holds the client: closing it under the run blocks until its requests time
        # out (up to --canary-timeout). The process is exiting; its connections close with it.
        if not any(w.alive() for w in self.supervisor.workers if w.name == "canary"):
            self.canary.close()
