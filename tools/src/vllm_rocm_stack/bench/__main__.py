"""`make bench`: what the sidecar costs, measured next to a baseline in the same run. Prints ratios and writes
JSON; asserts nothing about wall time (machines differ).

Measured here: log-parsing throughput against `grep -E` of the same anchors; detection latency from a log line
to /metrics; the running sidecar's memory growth and CPU while it reads a long log, and at idle."""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..config import WORK
from .loggen import GREP_PATTERN, generate

DOWNGRADE = ("(EngineCore_DP0 pid=1) WARNING 12-02 11:00:05 [gpu_model_runner.py:3643] CUDAGraphMode.FULL is not "
             "supported with AiterFlashAttentionMetadataBuilder backend (support: "
             "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=FULL_AND_PIECEWISE\n")
ENGINE = ('(EngineCore_DP0 pid=1) INFO 12-02 11:00:01 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: '
          'model=\'m\', enforce_eager=False, compilation_config={"level":3,"cudagraph_mode":2}\n')


def timed(cmd: list[str]) -> float:
    # Output goes to a pipe, not /dev/null: GNU grep stops at the first match when its output is /dev/null.
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.PIPE)
    return time.perf_counter() - t0


def bench_parse(log: Path, reps: int) -> dict:
    parser = [sys.executable, "-m", "vllm_rocm_health", "parse", str(log)]
    grep = ["grep", "-E", "-c", GREP_PATTERN, str(log)]
    p = statistics.median(timed(parser) for _ in range(reps))
    g = statistics.median(timed(grep) for _ in range(reps))
    lines = sum(1 for _ in log.open("rb"))
    return {"lines": lines, "parser_s": p, "grep_s": g, "ratio": p / g, "parser_lines_per_s": lines / p}


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process, from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def bench_sidecar(work: Path, reps: int, load_lines: int, idle_seconds: float) -> dict:
    repo = Path(__file__).resolve().parents[4]
    sys.path.insert(0, str(repo))
    from tests.support.sidecar import SidecarProcess

    log = work / "live.log"
    log.write_text("")
    sc = SidecarProcess(["--log-source", f"file:{log}", "--vllm-url", "http://127.0.0.1:9", "--health-interval", "5"],
                        work / "sidecar.out")
    try:
        latencies = []
        for _ in range(reps):
            with log.open("a") as f:
                f.write(ENGINE)
            sc.wait_for(lambda: sc.value("vllm_cudagraph_mode_downgraded") == 0, 5)
            t0 = time.perf_counter()
            with log.open("a") as f:
                f.write(DOWNGRADE)
            sc.wait_for(lambda: sc.value("vllm_cudagraph_mode_downgraded") == 1, 5)
            latencies.append(time.perf_counter() - t0)
        cpu0, rss0 = _proc_stats(sc.proc.pid)
        time.sleep(idle_seconds)
        cpu1, _ = _proc_stats(sc.proc.pid)
        idle_cpu_per_min = (cpu1 - cpu0) * 60 / idle_seconds
        # Load: a long realistic log appended in slices, RSS sampled after each slice.
        src = work / "load.log"
        generate(src, load_lines, seed=11)
        data = src.read_bytes()
        slices, rss = 8, []
        t0, c0 = time.perf_counter(), cpu1
        for i in range(slices):
            with log.open("ab") as f:
                f.write(data[i * len(data) // slices:(i + 1) * len(data) // slices])
            target = 2 * reps + (i + 1) * load_lines // slices
            sc.wait_for(lambda target=target: (sc.value("vllm_sidecar_log_lines_total") or 0) >= target - slices, 120)
            rss.append(_proc_stats(sc.proc.pid)[1])
        wall = time.perf_counter() - t0
        c1, _ = _proc_stats(sc.proc.pid)
    finally:
        sc.stop()
    return {"detect_latency_s_median": statistics.median(latencies), "detect_latency_s_max": max(latencies),
            "idle_cpu_s_per_min": idle_cpu_per_min, "load_lines": load_lines, "load_wall_s": wall,
            "load_cpu_s_per_min": (c1 - c0) / wall * 60, "rss_start_mib": rss0 / 2**20,
            "rss_after_slices_mib": [round(r / 2**20, 1) for r in rss],
            "rss_growth_mib_per_million_lines": (rss[-1] - rss[len(rss) // 2]) / 2**20 / (load_lines / 2 / 1e6)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm-rocm-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=2_000_000, help="lines of the generated log for the parse bench")
    ap.add_argument("--load-lines", type=int, default=400_000, help="lines pushed through the running sidecar")
    ap.add_argument("--reps", type=int, default=5, help="repetitions (medians are reported)")
    ap.add_argument("--idle-seconds", type=float, default=10.0, help="how long idle CPU is measured")
    ap.add_argument("--out", type=Path, default=WORK / "bench" / "result.json")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        work = Path(tmp)
        log = work / "big.log"
        print(f"==> generating a {args.lines:,}-line vLLM log", flush=True)
        size = generate(log, args.lines)
        print(f"==> parse throughput: sidecar parser vs grep -E, {args.reps} runs each ({size / 2**20:.0f} MiB)",
              flush=True)
        parse = bench_parse(log, args.reps)
        print("==> the running sidecar: detection latency, idle CPU, memory under a long log", flush=True)
        side = bench_sidecar(work, args.reps, args.load_lines, args.idle_seconds)
    result = {"machine": {"cpus": __import__("os").cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()}, "parse": parse, "sidecar": side}
    args.out.write_text(json.dumps(result, indent=2))
    rows = [
        ("log parse, sidecar", f"{parse['parser_s']:.2f} s", f"{parse['parser_lines_per_s']:,.0f} lines/s"),
        ("log parse, grep -E (baseline)", f"{parse['grep_s']:.2f} s", f"ratio sidecar/grep = {parse['ratio']:.1f}x"),
        ("detection latency (log line -> /metrics)", f"{side['detect_latency_s_median'] * 1000:.0f} ms median",
         f"max {side['detect_latency_s_max'] * 1000:.0f} ms"),
        ("CPU at idle", f"{side['idle_cpu_s_per_min']:.2f} s/min", ""),
        ("CPU under log load", f"{side['load_cpu_s_per_min']:.1f} s/min",
         f"{side['load_lines'] / side['load_wall_s']:,.0f} lines/s"),
        ("RSS start -> end", f"{side['rss_start_mib']:.0f} -> {side['rss_after_slices_mib'][-1]:.0f} MiB",
         f"slope {side['rss_growth_mib_per_million_lines']:.1f} MiB per 1M lines (2nd half)"),
    ]
    width = max(len(r[0]) for r in rows)
    print()
    for name, a, b in rows:
        print(f"  {name:<{width}}  {a:>18}  {b}")
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
