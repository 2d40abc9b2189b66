"""The running sidecar on log traffic alone: detection latency (line written -> /metrics), CPU at idle and while
it reads a long log, and memory over that log."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from ..sidecar_process import SidecarProcess
from .loggen import generate
from .procstat import cpu_and_rss, slope

DOWNGRADE = (
    "(EngineCore_DP0 pid=1) WARNING 12-02 11:00:05 [gpu_model_runner.py:3643] CUDAGraphMode.FULL is not "
    "supported with AiterFlashAttentionMetadataBuilder backend (support: "
    "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=FULL_AND_PIECEWISE\n"
)
ENGINE = (
    "(EngineCore_DP0 pid=1) INFO 12-02 11:00:01 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
    'model=\'m\', enforce_eager=False, compilation_config={"level":3,"cudagraph_mode":2}\n'
)
SLICES = 8


def bench_sidecar(work: Path, reps: int, load_lines: int, idle_seconds: float) -> dict:
    log = work / "live.log"
    log.write_text("")
    sc = SidecarProcess(
        [
            "--log-source",
            f"file:{log}",
            "--vllm-url",
            "http://127.0.0.1:9",
            "--health-interval",
            "5",
            "--no-canary-enabled",
        ],
        work / "sidecar.out",
    )
    try:
        latencies = []
        for _ in range(reps):
            with log.open("a") as f:
                f.write(ENGINE)
            if not sc.wait_for(lambda: sc.value("vllm_cudagraph_mode_downgraded") == 0, 10):
                raise RuntimeError("the sidecar did not see the engine (re)start line")
            t0 = time.perf_counter()
            with log.open("a") as f:
                f.write(DOWNGRADE)
            if not sc.wait_for(lambda: sc.value("vllm_cudagraph_mode_downgraded") == 1, 10):
                raise RuntimeError("the sidecar did not see the downgrade line within 10 s")
            latencies.append(time.perf_counter() - t0)
        cpu0, rss0 = cpu_and_rss(sc.proc.pid)
        time.sleep(idle_seconds)
        cpu1, _ = cpu_and_rss(sc.proc.pid)
        # Load: a long realistic log appended in slices, RSS sampled after each slice.
        src = work / "load.log"
        generate(src, load_lines, seed=11)
        data = src.read_bytes()
        rss = []
        t0 = time.perf_counter()
        for i in range(SLICES):
            start, end = i * len(data) // SLICES, (i + 1) * len(data) // SLICES
            with log.open("ab") as out:
                out.write(data[start:end])
            # Complete lines written so far (a slice may end mid-line; that line is held back until completed).
            target = 2 * reps + data.count(b"\n", 0, end)

            def read_all(t: int = target) -> bool:
                return (sc.value("vllm_sidecar_log_lines_total") or 0) >= t

            if not sc.wait_for(read_all, 120):
                raise RuntimeError(f"the sidecar did not read {target} lines within 120 s")
            rss.append(cpu_and_rss(sc.proc.pid)[1])
        wall = time.perf_counter() - t0
        cpu2, _ = cpu_and_rss(sc.proc.pid)
    finally:
        sc.stop()
    half = SLICES // 2
    millions = [(i + 1) * load_lines / SLICES / 1e6 for i in range(SLICES)]
    return {
        "detect_latency_s_median": statistics.median(latencies),
        "detect_latency_s_max": max(latencies),
        "idle_cpu_s_per_min": (cpu1 - cpu0) * 60 / idle_seconds,
        "load_lines": load_lines,
        "load_wall_s": wall,
        "load_cpu_s_per_min": (cpu2 - cpu1) / wall * 60,
        "rss_start_mib": rss0 / 2**20,
        "rss_after_slices_mib": [round(r / 2**20, 1) for r in rss],
        "rss_growth_mib_per_million_lines": slope(millions[half:], [r / 2**20 for r in rss[half:]]),
    }
