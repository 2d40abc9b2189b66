"""Log-parsing throughput: `vllm-rocm-health parse` (each prefilter) against `grep -E` of the same anchors, on the
same generated file, in the same run."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from .loggen import GREP_PATTERN


def timed(cmd: list[str]) -> float:
    # Output goes to a pipe, not /dev/null: GNU grep stops at the first match when its output is /dev/null.
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.PIPE)
    return time.perf_counter() - t0


def bench_parse(log: Path, reps: int) -> dict:
    def parser(prefilter: str) -> list[str]:
        return [sys.executable, "-m", "vllm_rocm_health", "parse", "--prefilter", prefilter, str(log)]

    grep = ["grep", "-E", "-c", GREP_PATTERN, str(log)]
    runs: dict[str, list[float]] = {"hyperscan": [], "find": [], "grep": []}
    for _ in range(reps):  # interleaved, so that a noisy neighbour hits all three alike
        runs["hyperscan"].append(timed(parser("hyperscan")))
        runs["find"].append(timed(parser("find")))
        runs["grep"].append(timed(grep))
    med = {k: statistics.median(v) for k, v in runs.items()}
    with log.open("rb") as f:
        lines = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 22), b""))
    return {
        "lines": lines,
        "bytes": log.stat().st_size,
        "parser_s": med["hyperscan"],
        "find_s": med["find"],
        "grep_s": med["grep"],
        "ratio": med["hyperscan"] / med["grep"],
        "find_ratio": med["find"] / med["grep"],
        "parser_lines_per_s": lines / med["hyperscan"],
        "runs_s": runs,
    }
