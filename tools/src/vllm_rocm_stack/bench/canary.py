"""The canary against real vLLM CPU servers: its load as a share of a steady client load at default settings,
its latency, the time from a wrong-answer server to the metric flipping, and the sidecar's memory and CPU over
hours-equivalent of log and canary traffic."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner
from vllm_rocm_health.canary.client import CompletionClient
from vllm_rocm_health.canary.runner import record_baseline

from ..config import WORK
from ..proxy import SwitchableProxy
from ..sidecar_process import SidecarProcess, free_port
from ..vllm_server import VllmServer
from .load import SteadyLoad, served_counters
from .loggen import generate
from .procstat import cpu_and_rss, slope

DEFAULTS = CanaryConfig()
MODEL_NAME = "smollm2-135m-instruct"


@dataclass
class Servers:
    good_url: str
    bad_url: str
    own: tuple[VllmServer, ...] = ()

    def stop(self) -> None:
        for s in self.own:
            s.stop()


def start_servers(work: Path) -> Servers:
    """The good model and its perturbed copy (same served name), started side by side."""
    models = WORK / "models"
    good = VllmServer(models / "smollm2-135m-instruct", MODEL_NAME, free_port(), work / "vllm-good.log")
    bad = VllmServer(models / "smollm2-135m-instruct-perturbed", MODEL_NAME, free_port(), work / "vllm-bad.log")
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(s.start, 600.0) for s in (good, bad)]
        errors = [f.exception() for f in futures]
    if any(errors):
        good.stop()
        bad.stop()
        raise RuntimeError(f"vLLM did not start: {next(e for e in errors if e)}")
    return Servers(good.base_url, bad.base_url, (good, bad))


def _canary_totals(reg: CollectorRegistry) -> tuple[float, float]:
    """(requests, prompt+completion tokens) the canary has sent so far."""
    tokens = sum(reg.get_sample_value("vllm_canary_tokens_total", {"kind": k}) or 0.0 for k in ("prompt", "completion"))
    return reg.get_sample_value("vllm_canary_requests_total") or 0.0, tokens


def bench_load(good_url: str, baseline: Path, window: float, runs: int, concurrency: int) -> dict:
    """A steady load for `window` seconds with `runs` default-settings canary runs spread over it."""
    reg = CollectorRegistry()
    runner = CanaryRunner(CanaryConfig(baseline=str(baseline)), good_url, reg)
    idle = runner.run_once()  # the canary alone: its latency on an idle server
    model = CompletionClient(good_url, 10).model_id()
    req0, tok0 = _canary_totals(reg)
    before = served_counters(good_url)
    t0 = time.monotonic()
    durations, outcomes = [], []
    with SteadyLoad(good_url, model, concurrency) as load:
        for i in range(runs):
            time.sleep(max(0.0, t0 + (i + 0.5) * window / runs - time.monotonic()))
            r = runner.run_once()
            durations.append(r.duration)
            outcomes.append(r.outcome)
        time.sleep(max(0.0, t0 + window - time.monotonic()))
    wall = time.monotonic() - t0
    after = served_counters(good_url)
    req1, tok1 = _canary_totals(reg)
    canary_requests, canary_tokens = req1 - req0, tok1 - tok0
    served_tokens = (
        after["prompt_tokens"] - before["prompt_tokens"] + after["completion_tokens"] - before["completion_tokens"]
    )
    served_requests = after["requests"] - before["requests"]
    # Per hour at default settings (one run per DEFAULTS.interval) against what the load got per hour.
    per_hour = 3600 / DEFAULTS.interval
    c_tok_h, c_req_h = canary_tokens / runs * per_hour, canary_requests / runs * per_hour
    load_tok_h = (served_tokens - canary_tokens) * 3600 / wall
    load_req_h = (served_requests - canary_requests) * 3600 / wall
    return {
        "window_s": wall,
        "canary_runs": runs,
        "outcomes": outcomes,
        "load_concurrency": concurrency,
        "load_requests": load.requests,
        "load_errors": load.errors,
        "canary_requests_per_run": canary_requests / runs,
        "canary_tokens_per_run": canary_tokens / runs,
        "canary_requests_per_hour": c_req_h,
        "canary_tokens_per_hour": c_tok_h,
        "served_tokens_per_hour": load_tok_h + c_tok_h,
        "served_requests_per_hour": load_req_h + c_req_h,
        "token_share": c_tok_h / (load_tok_h + c_tok_h),
        "request_share": c_req_h / (load_req_h + c_req_h),
        "latency_idle_s": idle.duration,
        "latency_under_load_s_median": statistics.median(durations),
    }


def bench_flip(servers: Servers, baseline: Path, work: Path, interval: float, reps: int, seed: int = 3) -> dict:
    """Re-point the sidecar's vLLM from the good to the perturbed server at a random phase of the canary
    interval; time until /metrics says the canary failed (and back, until it passes again)."""
    rng = random.Random(seed)
    proxy = SwitchableProxy(servers.good_url)
    sc = SidecarProcess(
        [
            "--vllm-url",
            proxy.url,
            "--log-source",
            "none",
            "--canary-baseline",
            str(baseline),
            "--canary-interval",
            str(interval),
        ],
        work / "sidecar-flip.out",
    )
    try:
        if not sc.wait_for(lambda: sc.value("vllm_canary_passing") == 1, interval + 180):
            raise RuntimeError(f"the canary never passed on the good server:\n{sc.log_path.read_text()[-2000:]}")
        fail: list[float] = []
        recover: list[float] = []
        for _ in range(reps):
            for target, want, out in ((servers.bad_url, 0, fail), (servers.good_url, 1, recover)):
                time.sleep(rng.uniform(0, interval))
                fails = sc.total("vllm_canary_runs_total", outcome="fail")
                proxy.switch(target)
                t0 = time.monotonic()

                def flipped(want: int = want) -> bool:
                    return sc.value("vllm_canary_passing") == want

                ok = sc.wait_for(flipped, 2 * interval + 180)
                if not ok:
                    raise RuntimeError(f"canary did not flip to {want}:\n{sc.log_path.read_text()[-2000:]}")
                out.append(time.monotonic() - t0)
                if want == 0 and sc.total("vllm_canary_runs_total", outcome="fail") <= fails:
                    raise RuntimeError("the canary flipped on an error, not on wrong answers")
    finally:
        sc.stop()
        proxy.close()
    return {
        "interval_s": interval,
        "reps": reps,
        "fail_latency_s": fail,
        "recover_latency_s": recover,
        "fail_latency_s_median": statistics.median(fail),
        "fail_latency_intervals_max": max(fail) / interval,
        "recover_latency_s_median": statistics.median(recover),
    }


def bench_hours(good_url: str, baseline: Path, work: Path, hours: float, lines_per_hour: int, interval: float) -> dict:
    """`hours` hour-equivalents: per hour, the canary's default number of runs (3600 / default interval,
    here `interval` seconds apart) and `lines_per_hour` log lines. RSS and CPU sampled after each run."""
    runs_per_hour = round(3600 / DEFAULTS.interval)
    total_runs = max(2, round(hours * runs_per_hour))
    lines_per_run = lines_per_hour // runs_per_hour
    src = work / "hours-src.log"
    generate(src, lines_per_run * total_runs, seed=5)
    data, live = src.read_bytes(), work / "hours.log"
    live.write_bytes(b"")
    sc = SidecarProcess(
        [
            "--vllm-url",
            good_url,
            "--log-source",
            f"file:{live}",
            "--canary-baseline",
            str(baseline),
            "--canary-interval",
            str(interval),
        ],
        work / "sidecar-hours.out",
    )
    rss, cpu, xs = [], [], []
    try:
        cpu0, rss0 = cpu_and_rss(sc.proc.pid)
        t0 = time.monotonic()
        for i in range(total_runs):
            # The log first: the sidecar asks its canary only once the log shows an engine whose capture
            # finished (the first chunk holds the startup and the capture lines).
            end = (i + 1) * len(data) // total_runs
            with live.open("ab") as f:
                f.write(data[i * len(data) // total_runs : end])
            want = data.count(b"\n", 0, end)

            def read_all(w: int = want) -> bool:
                return (sc.value("vllm_sidecar_log_lines_total") or 0) >= w

            if not sc.wait_for(read_all, 120):
                raise RuntimeError(f"the sidecar did not read {want} log lines within 120 s")

            def ran(i: int = i) -> bool:
                return sc.total("vllm_canary_runs_total") >= i + 1

            if not sc.wait_for(ran, interval + 180):
                raise RuntimeError(f"canary run {i + 1} never came:\n{sc.log_path.read_text()[-2000:]}")
            c, r = cpu_and_rss(sc.proc.pid)
            cpu.append(c - cpu0)
            rss.append(r / 2**20)
            xs.append((i + 1) / runs_per_hour)
        wall = time.monotonic() - t0
        outcomes = {o: sc.total("vllm_canary_runs_total", outcome=o) for o in ("pass", "fail", "error")}
    finally:
        sc.stop()
    half = len(xs) // 2
    return {
        "hour_equivalents": xs[-1],
        "canary_runs": total_runs,
        "log_lines": lines_per_run * total_runs,
        "wall_s": wall,
        "outcomes": outcomes,
        "rss_start_mib": rss0 / 2**20,
        "rss_mib": [round(r, 1) for r in rss],
        "rss_slope_mib_per_hour": slope(xs[half:], rss[half:]),
        "cpu_s_per_hour_equivalent": cpu[-1] / xs[-1],
    }


def bench_live(
    work: Path,
    good_url: str | None,
    bad_url: str | None,
    window: float,
    load_runs: int,
    concurrency: int,
    flip_interval: float,
    flip_reps: int,
    hours: float,
    lines_per_hour: int,
    hours_interval: float,
    progress: Callable[[str], None] = print,
) -> dict:
    if good_url and bad_url:
        servers = Servers(good_url, bad_url)
    else:
        progress("  starting the vLLM CPU servers (good model and its perturbed copy, about 1-2 minutes)")
        servers = start_servers(work)
    try:
        baseline = work / "baseline.json"
        progress("  recording a canary baseline at default settings on the good server")
        record_baseline(CanaryConfig(), servers.good_url, notes="bench").save(baseline)
        progress(f"  canary load vs a steady load of {concurrency} clients, {window:.0f} s, {load_runs} canary runs")
        load = bench_load(servers.good_url, baseline, window, load_runs, concurrency)
        progress(f"  wrong-answer server -> canary metric: {flip_reps} switches, canary interval {flip_interval:.0f} s")
        flip = bench_flip(servers, baseline, work, flip_interval, flip_reps)
        progress(f"  {hours:g} hour-equivalents of log ({lines_per_hour:,} lines/h) and canary traffic")
        hrs = bench_hours(servers.good_url, baseline, work, hours, lines_per_hour, hours_interval)
    finally:
        servers.stop()
    return {"load": load, "flip": flip, "hours": hrs}
