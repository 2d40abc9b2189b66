"""Child processes of the local stack: started with their output in a log file, stopped gently, then firmly."""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)
_RUNNING: set[ManagedProcess] = set()  # stopped at interpreter exit, whatever path led there
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies, even by SIGKILL (a test runner killed at its
    timeout must not leave a 3 GiB vLLM behind). Linux ties this to the forking *thread*, so it is only used for
    children started from the main thread."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the atexit hook still stops children on a normal exit
        pass


@atexit.register
def _stop_all() -> None:
    for p in list(_RUNNING):
        p.stop(timeout=10)


class ManagedProcess:
    """One child process whose stdout+stderr go to `log_path`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        log.debug("starting %s: %s", self.name, " ".join(self.argv))
        # A new session so that Ctrl-C in the terminal reaches only us; we stop children in order.
        main = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if main else None,
        )
        out.close()
        _RUNNING.add(self)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            data = self.log_path.read_bytes()[-20000:]
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20.0, sig: int = signal.SIGINT) -> int | None:
        """Signal the process group, wait up to `timeout`, then SIGKILL it. Returns the exit code."""
        if self.proc is None:
            return None
        _RUNNING.discard(self)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s; killing it", self.name, timeout)
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        return self.proc.returncode


def wait_until(
    predicate: Callable[[], object],
    timeout: float,
    interval: float = 0.5,
    on_tick: Callable[[float], None] | None = None,
) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds pass; `on_tick(elapsed)` reports progress."""
    start = time.monotonic()
    while True:
        if predicate():
            return True
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            return False
        if on_tick is not None:
            on_tick(elapsed)
        time.sleep(interval)


# Server ports come from below the kernel's ephemeral range (and below Kubernetes' NodePorts, 30000-32767): the
# kernel gives a port of that range to any process that asks for any free one (bind to port 0, an outgoing
# connection, vLLM's own internal sockets), and a port chosen here stays unbound until the server has imported vLLM
# and bound it, seconds to minutes later (server.py checks, besides, that what answers there is the server).
PORT_BAND = (20000, 30000)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_TRIES = 200


def _ephemeral_low() -> int | None:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now on `host`, for a server this process is about to start: a random one of
    PORT_BAND below the kernel's ephemeral range; the kernel's own choice when no such port is free (or the
    ephemeral range starts below the band)."""
    low, high = PORT_BAND
    ephemeral = _ephemeral_low()
    if ephemeral is not None:
        high = min(high, ephemeral)
    for port in random.sample(range(low, high), min(PORT_TRIES, max(0, high - low))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:  # in use (or in TIME_WAIT): another
                continue
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
