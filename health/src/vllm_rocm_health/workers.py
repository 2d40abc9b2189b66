"""Supervised worker threads. Every loop the sidecar runs (log follower, /health poller, canary) is a Worker:
it beats while it makes progress, a supervisor restarts it with back-off when it dies, and readiness asks each
worker whether it is up. Nothing stops silently: a dead or silent worker turns /readyz 503 with its reason."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

MIN_BACKOFF = 1.0
MAX_BACKOFF = 60.0


@dataclass
class WorkerStatus:
    name: str
    up: bool
    reason: str  # why it is not up ("" when up)
    restarts: int


class Worker:
    """One named loop in its own thread. `target(worker)` runs until `stop` is set; it calls `worker.beat()`
    whenever it makes progress (or is idle by design). `max_silence`: seconds without a beat after which the
    worker counts as hung; None for loops that may legitimately block forever (reading stdin)."""

    def __init__(
        self,
        name: str,
        target: Callable[[Worker], None],
        stop: threading.Event,
        max_silence: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.target = target
        self.stop = stop
        self.max_silence = max_silence
        self.clock = clock
        self.restarts = 0
        self.last_error = ""
        self._last_beat = clock()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._next_start = 0.0
        self._backoff = MIN_BACKOFF

    def beat(self) -> None:
        self._last_beat = self.clock()

    def start(self) -> None:
        with self._lock:
            self._last_beat = self.clock()
            self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
            self._thread.start()

    def _main(self) -> None:
        try:
            self.target(self)
        except BaseException as e:  # noqa: BLE001 - whatever kills the loop must be seen, not swallowed
            self.last_error = f"{type(e).__name__}: {e}"
            log.exception("worker %s died", self.name)
        else:
            if not self.stop.is_set():
                self.last_error = "its loop returned"
                log.error("worker %s stopped unexpectedly", self.name)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def status(self) -> WorkerStatus:
        if not self.alive():
            why = f"{self.name} worker is not running ({self.last_error or 'not started'})"
            return WorkerStatus(self.name, False, why, self.restarts)
        silent = self.clock() - self._last_beat
        if self.max_silence is not None and silent > self.max_silence:
            why = f"{self.name} worker is stuck: no progress for {silent:.0f} s (limit {self.max_silence:.0f} s)"
            return WorkerStatus(self.name, False, why, self.restarts)
        return WorkerStatus(self.name, True, "", self.restarts)

    def restart_if_dead(self) -> bool:
        """Restart a dead worker once its back-off has passed; never a live (possibly stuck) one, since two
        copies of a loop would race (two canaries at once is exactly the load this sidecar must not add)."""
        if self.alive() or self.stop.is_set():
            return False
        now = self.clock()
        if self._next_start == 0.0:
            self._next_start = now + self._backoff
            log.warning("restarting worker %s in %.0f s", self.name, self._backoff)
            return False
        if now < self._next_start:
            return False
        self._next_start = 0.0
        self._backoff = min(MAX_BACKOFF, self._backoff * 2)
        self.restarts += 1
        self.start()
        return True

    def note_healthy(self) -> None:
        """Reset the back-off once a restarted worker has stayed up for a while."""
        self._backoff = MIN_BACKOFF

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


class Supervisor:
    """Restarts dead workers. Readiness does not depend on the supervisor being alive: it asks each worker."""

    def __init__(
        self, workers: list[Worker], stop: threading.Event, period: float = 1.0, healthy_after: float = 300.0
    ) -> None:
        self.workers = workers
        self.stop = stop
        self.period = period
        self.healthy_after = healthy_after
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> None:
        for w in self.workers:
            w.start()
        self._thread.start()

    def _loop(self) -> None:
        up_since: dict[str, float] = {}
        while not self.stop.wait(self.period):
            now = time.monotonic()
            for w in self.workers:
                try:
                    if w.restart_if_dead():
                        up_since[w.name] = now
                    elif w.alive() and now - up_since.get(w.name, now) > self.healthy_after:
                        w.note_healthy()
                except Exception:  # a supervisor that dies restarts nothing; log and carry on
                    log.exception("supervisor: cannot restart %s", w.name)

    def statuses(self) -> list[WorkerStatus]:
        return [w.status() for w in self.workers]

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for w in self.workers:
            w.join(max(0.0, deadline - time.monotonic()))
