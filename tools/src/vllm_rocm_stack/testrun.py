"""`make test`: the whole suite as two pytest sessions side by side, so the machine's waits overlap.

The system tier (images, podman, compose, the Kubernetes cluster) spends most of its time on disk and on container
start-up; the unit and integration tiers spend theirs on one CPU. Run one after the other on a 2-core machine they
add up; side by side, image builds and the cluster's image import overlap the unit and integration tests. Each session
has its own temp directory and report; their lines are prefixed `[system]` / `[main]` as they come, and each one's
summary is printed again at the end. The run fails when either fails (and when either collects no tests). Ctrl-C or a
failure to start stops both.

    python -m vllm_rocm_stack.testrun [--serial] [-- PYTEST_ARGS...]

With pytest arguments (a path, -k, -m) the suite runs as one session: you chose what to run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .config import WORK

SESSIONS = (("system", "system"), ("main", "not system"))


def _pump(name: str, proc: subprocess.Popen, log: Path, tail: list[str]) -> None:
    with log.open("w") as out:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
            tail.append(line)
            del tail[:-40]


def run_split(extra: list[str]) -> int:
    tmp = WORK / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[str, subprocess.Popen, threading.Thread, list[str], float]] = []
    try:
        for name, marks in SESSIONS:
            log = tmp / f"pytest-{name}.log"
            cmd = [
                sys.executable, "-m", "pytest", "-m", marks, f"--basetemp={tmp / f'pytest-{name}'}",
                "-p", "no:cacheprovider", *extra,
            ]  # fmt: skip
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True
            )
            tail: list[str] = []
            pump = threading.Thread(target=_pump, args=(name, proc, log, tail), daemon=True)
            pump.start()
            procs.append((name, proc, pump, tail, time.monotonic()))
        codes = {}
        for name, proc, pump, _, t0 in procs:
            codes[name] = proc.wait()
            pump.join()
            print(f"[{name}] exit {codes[name]} after {(time.monotonic() - t0) / 60:.1f} min", flush=True)
    except BaseException:
        for _, proc, *_ in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for _, proc, *_ in procs:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        raise
    print(f"\n== summaries (whole reports: {tmp}/pytest-<session>.log)")
    for name, _, _, tail, _ in procs:
        for line in tail:
            if line.startswith(("FAILED", "ERROR")) or " passed" in line or " failed" in line:
                print(f"[{name}] {line.rstrip()}")
    for name, rc in codes.items():
        if rc == 5:
            print(f"make test: the {name} session collected no tests: a broken test tree, not a pass", file=sys.stderr)
    return 0 if all(rc == 0 for rc in codes.values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serial", action="store_true", help="one pytest session (the tiers one after the other)")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest; any makes it one session")
    a = ap.parse_args(argv)
    if a.serial or a.pytest_args:
        rc = subprocess.call([sys.executable, "-m", "pytest", *a.pytest_args])
        if rc == 5:
            print("make test: pytest collected no tests: a broken test tree, not a pass", file=sys.stderr)
        return rc
    return run_split([])


if __name__ == "__main__":
    sys.exit(main())
