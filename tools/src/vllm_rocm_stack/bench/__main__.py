"""`make bench`: what the sidecar and its canary cost, measured next to a baseline in the same run. Prints a table
of medians and ratios and writes JSON; asserts nothing about wall time (machines differ).

Without a vLLM server: log-parsing throughput against `grep -E` of the same anchors, detection latency from a
log line to /metrics, the sidecar's CPU at idle and under log load, and its memory over a long log.
With real vLLM CPU servers (started here, or given with --vllm-url/--bad-vllm-url; skip with --no-live): the
canary's share of a steady load at default settings and its latency, the time from a wrong-answer server to the
canary metric flipping, and memory and CPU over hour-equivalents of log and canary traffic."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from ..config import WORK

USAGE_NOTE = """\
Run it as `make bench` (sets up the vLLM CPU build first), with options in BENCH_ARGS, e.g.
  make bench BENCH_ARGS="--no-live --reps 3"
or, once set up, directly: .work/venv/bin/python -m vllm_rocm_stack.bench --no-live --reps 3
It prints its own wall time at the end; the README quotes one run with the defaults."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, and every option's default in its help."""


def build_parser() -> argparse.ArgumentParser:
    # Only stdlib imports above this point: `make bench BENCH_ARGS=--help` prints this without any setup.
    ap = argparse.ArgumentParser(
        prog="make bench",
        usage='make bench BENCH_ARGS="[options]"',
        description=__doc__,
        epilog=USAGE_NOTE,
        formatter_class=_HelpFormatter,
    )
    ap.add_argument("--lines", type=int, default=2_000_000, help="lines of the generated log for the parse bench")
    ap.add_argument("--load-lines", type=int, default=400_000, help="lines pushed through the running sidecar")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of the parse and latency benches (medians)")
    ap.add_argument("--idle-seconds", type=float, default=10.0, help="how long idle CPU is measured")
    ap.add_argument("--out", type=Path, default=WORK / "bench" / "result.json", help="JSON result file")
    live = ap.add_argument_group("live (real vLLM CPU servers)")
    live.add_argument("--no-live", action="store_true", help="skip everything that needs a vLLM server")
    live.add_argument("--vllm-url", default="", help="a running good server (else one is started)")
    live.add_argument("--bad-vllm-url", default="", help="a running perturbed server with the same served name")
    live.add_argument("--window", type=float, default=60.0, help="seconds of steady load for the canary share")
    live.add_argument("--load-runs", type=int, default=3, help="default-settings canary runs within the window")
    live.add_argument(
        "--concurrency", type=int, default=16, help="clients of the steady load (16 keeps the CPU server busy)"
    )
    live.add_argument("--flip-interval", type=float, default=20.0, help="canary interval while timing the flip")
    live.add_argument("--flip-reps", type=int, default=3, help="good->bad (and back) switches timed")
    live.add_argument("--hours", type=float, default=2.0, help="hour-equivalents of log and canary traffic")
    live.add_argument(
        "--lines-per-hour", type=int, default=360_000, help="log lines per hour-equivalent (a busy server: 100 lines/s)"
    )
    live.add_argument(
        "--hours-interval",
        type=float,
        default=1.0,
        help="seconds between canary runs in the hour-equivalent run (time compressed; the sidecar allows >= 1)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from vllm_rocm_qualify.machine import cpu_model  # late: --help needs none of these (nor the venv)

    from .loggen import generate
    from .parse import bench_parse
    from .report import table
    from .sidecar import bench_sidecar

    started = time.monotonic()
    if bool(args.vllm_url) != bool(args.bad_vllm_url):
        print("bench: give both --vllm-url and --bad-vllm-url, or neither", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "python": platform.python_version(),
        }
    }
    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        work = Path(tmp)
        log = work / "big.log"
        print(f"==> generating a {args.lines:,}-line vLLM log", flush=True)
        size = generate(log, args.lines)
        print(
            f"==> parse throughput: sidecar parser (hyperscan, find) vs grep -E, {args.reps} runs each "
            f"({size / 2**20:.0f} MiB)",
            flush=True,
        )
        result["parse"] = bench_parse(log, args.reps)
        log.unlink()
        print("==> the running sidecar: detection latency, idle CPU, memory under a long log", flush=True)
        result["sidecar"] = bench_sidecar(work, args.reps, args.load_lines, args.idle_seconds)
        if not args.no_live:
            from .canary import bench_live

            print("==> the canary against real vLLM CPU servers", flush=True)
            result["live"] = bench_live(
                work,
                args.vllm_url or None,
                args.bad_vllm_url or None,
                args.window,
                args.load_runs,
                args.concurrency,
                args.flip_interval,
                args.flip_reps,
                args.hours,
                args.lines_per_hour,
                args.hours_interval,
                progress=lambda m: print(m, flush=True),
            )
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    args.out.write_text(json.dumps(result, indent=2))
    print()
    print(table(result))
    print(f"\nJSON: {args.out}\nwall time: {result['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
