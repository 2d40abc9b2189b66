"""What `make test` costs, measured, for the README: the disk each folder of WORK takes, the Go caches of the
Kubernetes build (outside the clone), and the setup and test times of a run.

    python -m vllm_rocm_stack.work_report                       # WORK (VLLM_ROCM_WORK or .work/) and the Go caches
    python -m vllm_rocm_stack.work_report --log make-test.log   # ... and the times of that run
    python -m vllm_rocm_stack.work_report --run -- PYTEST_ARGS=-x   # time `make setup-vllm check`, then `make test`

It only reads (`du`, the log), except with --run. Sizes are disk usage (`du -B1`: blocks; a file hard-linked from
two folders counts once, in the first of them by name) in GB of 10^9 bytes (`du -sh` prints GiB: 7% smaller
numbers). The times of a log come from what the run printed: GNU time's elapsed wall clock (the whole run), pytest's
closing line (the tests: its count and seconds), the setup steps' own "built in N s" lines; setup is the whole run
less the tests. The README quotes its output.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import REPO, WORK
from .kube_build import go_cache

GB = 1e9
# GNU time: "... 35:43.60elapsed ..." (its default format), or -v's "Elapsed (wall clock) time (...): 35:43.60"
_ELAPSED = re.compile(
    r"(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)elapsed|Elapsed \(wall clock\) time \([^)]*\): (?:(\d+):)?(\d+):(\d+(?:\.\d+)?)"
)
# pytest's closing line: "==== 2265 passed, 1 failed, 3 skipped in 2706.12s (0:45:06) ===="
_PYTEST = re.compile(r"^=+ (.+?) in (\d+(?:\.\d+)?)s(?: \([\d:]+\))? =+$", re.M)
# The setup steps' own timings: "==>   kube-apiserver built in 254 s", "done in 38.2 s"
_STEP = re.compile(r"(?:==>\s+)?([\w./ -]+?) built in (\d+(?:\.\d+)?) s|^(done) in (\d+(?:\.\d+)?) s", re.M)
_RC = re.compile(r"^rc=(\d+)$", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def disk_usage(paths: list[Path]) -> dict[Path, int]:
    """Bytes on disk of each path, from one `du` run (a file hard-linked from two of them counts once)."""
    if not paths:
        return {}
    proc = subprocess.run(
        ["du", "-s", "-B1", *map(str, paths)], capture_output=True, text=True, check=False, timeout=3600
    )
    sizes = {}
    for line in proc.stdout.splitlines():
        size, _, name = line.partition("\t")
        sizes[Path(name)] = int(size)
    missing = [p for p in paths if p not in sizes]
    if missing:
        raise RuntimeError(f"du gave no size for {missing}: {proc.stderr[-500:]}")
    return sizes


@dataclass
class Times:
    wall: float | None = None  # seconds, the whole run
    tests: float | None = None  # seconds, pytest's own
    tests_summary: str = ""  # "2265 passed, 1 failed"
    steps: list[tuple[str, float]] = field(default_factory=list)
    rc: int | None = None

    @property
    def setup(self) -> float | None:
        if self.wall is None:
            return None
        return self.wall - (self.tests or 0.0)


def parse_log(text: str) -> Times:
    text = _ANSI.sub("", text)
    t = Times()
    for m in _ELAPSED.finditer(text):  # one per timed run: a log may hold several
        h, mnt, s = (m.group(1), m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5), m.group(6))
        t.wall = (t.wall or 0.0) + int(h or 0) * 3600 + int(mnt) * 60 + float(s)
    for m in _PYTEST.finditer(text):
        t.tests_summary = ", ".join(x for x in (t.tests_summary, m.group(1)) if x)
        t.tests = (t.tests or 0.0) + float(m.group(2))
    for m in _STEP.finditer(text):
        t.steps.append((m.group(1) or "model conversion", float(m.group(2) or m.group(4))))
    rcs = _RC.findall(text)
    t.rc = int(rcs[-1]) if rcs else None
    return t


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB"


def _min(s: float) -> str:
    return f"{s / 60:.1f} min"


def report(work: Path, go: Path, runs: list[tuple[str, Times]]) -> str:
    folders = sorted(p for p in work.iterdir() if p.is_dir() and not p.is_symlink()) if work.is_dir() else []
    sizes = {**disk_usage(folders), **disk_usage([work])}  # du counts a directory once per run
    lines = [f"WORK {work}: {_gb(sizes[work])} on disk"]
    for p in sorted(folders, key=lambda p: -sizes[p]):
        lines.append(f"  {p.name + '/':<16} {_gb(sizes[p]):>8}")
    if go.is_dir():
        lines.append(f"Go caches {go} (outside the clone): {_gb(disk_usage([go])[go])}")
    else:
        lines.append(f"Go caches {go}: not there (no Kubernetes build yet)")
    for log, times in runs:
        lines.append(f"run {log}:")
        if times.wall is None:
            lines.append("  no wall-clock time in the log (run it under /usr/bin/time, or use --run)")
        else:
            lines.append(f"  whole run {_min(times.wall)}; setup {_min(times.setup or 0.0)}")
        if times.tests is not None:
            lines.append(f"  tests {_min(times.tests)} ({times.tests_summary})")
        else:
            lines.append("  tests: pytest printed no closing line (the tests did not run to the end)")
        if times.rc is not None:
            lines.append(f"  exit status {times.rc}")
        for name, seconds in times.steps:
            lines.append(f"  setup step {name.strip()}: {seconds:.0f} s")
    return "\n".join(lines)


def run_make(checkout: Path, work: Path, make_args: list[str], log: Path) -> Times:
    """`make setup-vllm check` then `make test`, timed, their output in `log` (setup: the whole less pytest's own)."""
    with open(log, "w") as fh:

        def make(*targets: str) -> tuple[int, float]:
            t0 = time.monotonic()
            argv = ["make", "-C", str(checkout), *targets, f"WORK={work}", *make_args]
            rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
            return rc, time.monotonic() - t0

        rc, wall = make("setup-vllm", "check")
        if rc == 0:
            rc, tests = make("test")
            wall += tests
    t = parse_log(log.read_text(errors="replace"))
    t.wall, t.rc = wall, rc
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_rocm_stack.work_report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--work", type=Path, default=WORK, help="the WORK directory (default: %(default)s)")
    parser.add_argument("--go-cache", type=Path, default=None, help=f"the Go caches (default: {go_cache()})")
    parser.add_argument(
        "--log",
        type=Path,
        action="append",
        default=[],
        help="the output of a `make test` run to take the times from (repeat it for a run logged in parts, e.g. "
        "setup, then the tests: each is reported on its own)",
    )
    parser.add_argument("--run", action="store_true", help="run and time `make setup-vllm check` and `make test` first")
    parser.add_argument("make_args", nargs="*", help="with --run: more make arguments (PYTEST_ARGS=...)")
    args = parser.parse_args(argv)
    if args.run:
        out = args.log[0] if args.log else args.work.parent / "make-test.log"
        runs = [(str(out), run_make(REPO, args.work, args.make_args, out))]
    else:
        runs = [(str(p), parse_log(p.read_text(errors="replace"))) for p in args.log]
    print(report(args.work.resolve(), args.go_cache or go_cache(), runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
