"""Record a corpus of real vLLM logs on a lent GPU machine: many releases and options side by side on one GPU.

Runs on the device machine (Python 3.12, torch from its image, vLLM releases unpacked by unpack-site.sh under
SITE/vllm-<version> beside SITE/common); standard library only. Each case starts one `vllm serve` (or the OpenAI
API server module) with stdout and stderr in one file, as a container runtime keeps them, waits until /health
answers or the process ends, sends a few requests (some carrying client text that looks like vLLM's own lines),
then stops the server the way the case says (SIGINT, a killed engine, a restart on the same file). Next to each
log goes `<case>.facts.json`: what the command line asked for, what happened (ready or not, exit), and vLLM's own
engine config line as printed (the recorder does not interpret it: the sidecar's parser is what the tests check).

    python3 corpus.py list
    python3 corpus.py run --site /tmp/site --model /tmp/models/smollm2 --out /tmp/corpus [--parallel 12] [case ...]

Cases run side by side on one GPU, each sized with --kv-cache-memory-bytes (vLLM skips memory profiling then, so
concurrent starts do not disturb each other) and a small --gpu-memory-utilization (vLLM still checks at start
that this share of the card is free: 0.26.0 v1/worker/utils.py request_memory). Cases that size the cache by
--gpu-memory-utilization profile memory, which the other servers' allocations disturb: they run one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SERVED = "smollm2-135m-instruct"
KV_BYTES = "2000000000"
SMALL_UTIL = "0.05"
COMMON = ["--max-model-len", "2048", "--dtype", "bfloat16", "--seed", "0"]
MODES = ("NONE", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "FULL")
RELEASES = ("0.22.1", "0.24.0", "0.26.0")

# Client text that imitates vLLM's own lines: with --enable-log-requests it lands in the log (prompts, stop strings,
# the access log's request path). A parser that trusts it would see a new engine, a finished capture, a GPU fault.
FAKE_LINES = [
    "INFO 12-04 10:00:00 [core.py:98] Initializing a V1 LLM engine (v9.9.9) with config: model='x', "
    "compilation_config={'cudagraph_mode': <CUDAGraphMode.NONE: 0>}",
    "(EngineCore_DP0 pid=1) INFO 12-04 10:00:01 [gpu_model_runner.py:4500] Graph capturing finished in 1 secs, "
    "took 0.13 GiB",
    "Traceback (most recent call last):",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "Capturing CUDA graphs (decode, FULL): 100%|##########| 35/35 [00:01<00:00, 30.00it/s]",
    "ERROR 12-04 10:00:02 [core.py:700] EngineCore failed to start.",
]

LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout"}},
    "loggers": {"vllm": {"handlers": ["out"], "level": "INFO", "propagate": False}},
}


@dataclass
class Case:
    name: str
    release: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    sized: bool = True  # --kv-cache-memory-bytes; False: the cache sized by profiling (runs alone)
    life: str = "serve"  # serve | restart | crash
    tty: bool = False  # stdout/stderr on a pseudo-terminal (what `docker run -t` gives)
    entry: str = "serve"  # serve: `vllm serve`; api_server: python -m vllm.entrypoints.openai.api_server
    client_text: bool = False
    cuda_limit_gib: float = 0.0  # this process's caching-allocator limit (too little memory on purpose)
    note: str = ""


def mode_config(mode: str, **extra: object) -> list[str]:
    return ["--compilation-config", json.dumps({"cudagraph_mode": mode, **extra})]


def cases() -> list[Case]:
    out: list[Case] = []
    for rel in RELEASES:
        tag = rel.replace(".", "")
        for mode in MODES:
            out.append(Case(f"v{tag}-mode-{mode.lower()}", rel, mode_config(mode), note=f"cudagraph_mode {mode}"))
        out.append(
            Case(
                f"v{tag}-default-gpu-util",
                rel,
                ["--gpu-memory-utilization", "0.3"],
                sized=False,
                note="defaults, the cache sized by memory profiling (--gpu-memory-utilization)",
            )
        )
    r = "0.26.0"
    out += [
        Case("v0260-enforce-eager", r, ["--enforce-eager"], note="--enforce-eager"),
        Case("v0260-O0", r, ["-O0"], note="-O0: no compilation, no graphs"),
        Case("v0260-O1", r, ["-O1"], note="-O1: piecewise graphs"),
        Case("v0260-O3", r, ["-O3"], note="-O3"),
        Case("v0260-attn-flash", r, ["--attention-backend", "FLASH_ATTN"], note="--attention-backend FLASH_ATTN"),
        Case("v0260-attn-triton", r, ["--attention-backend", "TRITON_ATTN"], note="--attention-backend TRITON_ATTN"),
        Case(
            "v0260-attn-flex", r, ["--attention-backend", "FLEX_ATTENTION"], note="--attention-backend FLEX_ATTENTION"
        ),
        Case("v0260-kv-fp8", r, ["--kv-cache-dtype", "fp8"], note="--kv-cache-dtype fp8"),
        Case(
            "v0260-spec-ngram",
            r,
            [
                "--speculative-config",
                json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}),
            ],
            note="n-gram speculative decoding",
        ),
        Case("v0260-max-num-seqs-4", r, ["--max-num-seqs", "4"], note="--max-num-seqs 4"),
        Case("v0260-no-prefix-caching", r, ["--no-enable-prefix-caching"], note="prefix caching off"),
        Case("v0260-runner-v1", r, [], env={"VLLM_USE_V2_MODEL_RUNNER": "0"}, note="Model Runner V1 (env)"),
        Case("v0240-runner-v2", "0.24.0", [], env={"VLLM_USE_V2_MODEL_RUNNER": "1"}, note="Model Runner V2 (env)"),
        Case(
            "v0240-capture-sizes",
            "0.24.0",
            mode_config("FULL_AND_PIECEWISE", cudagraph_capture_sizes=[1, 2, 4, 8, 24]),
            note="custom cudagraph_capture_sizes",
        ),
        Case(
            "v0260-color-no-access-log",
            r,
            ["--disable-uvicorn-access-log"],
            env={"VLLM_LOGGING_COLOR": "1"},
            note="colored output forced by VLLM_LOGGING_COLOR=1 into a file, --disable-uvicorn-access-log",
        ),
        Case("v0240-tty", "0.24.0", [], tty=True, note="stdout/stderr on a pseudo-terminal (colors, tqdm redraws)"),
        Case(
            "v0260-log-requests",
            r,
            ["--enable-log-requests"],
            client_text=True,
            note="--enable-log-requests, prompts and stop strings that imitate vLLM's lines",
        ),
        Case(
            "v0260-restart",
            r,
            mode_config("FULL_AND_PIECEWISE"),
            life="restart",
            note="stopped, started again, same file",
        ),
        Case("v0260-engine-crash", r, [], life="crash", note="EngineCore SIGKILLed after serving"),
        Case(
            "v0260-logging-config",
            r,
            [],
            env={"VLLM_LOGGING_CONFIG_PATH": "@logging.json"},
            note="VLLM_LOGGING_CONFIG_PATH with another format (no [file.py:N] headers)",
        ),
        Case("v0260-logging-warning", r, [], env={"VLLM_LOGGING_LEVEL": "WARNING"}, note="VLLM_LOGGING_LEVEL=WARNING"),
        Case("v0260-logging-prefix", r, [], env={"VLLM_LOGGING_PREFIX": "[pod-a] "}, note="VLLM_LOGGING_PREFIX"),
        Case("v0260-api-server", r, mode_config("FULL_DECODE_ONLY"), entry="api_server", note="the API server module"),
    ]
    for gib in (2.3, 2.45, 2.6):
        out.append(
            Case(
                f"v0260-capture-oom-{gib}",
                r,
                ["--kv-cache-memory-bytes", "2000000000"],
                cuda_limit_gib=gib,
                note=f"caching allocator limited to {gib} GiB: too little memory for some start-up step",
            )
        )
    return out


# -- running one case ------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return round(time.monotonic() - self.t0, 1)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def http(url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")[:2000]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")[:500]
    except Exception as e:  # noqa: BLE001 - recorded as the outcome
        return 0, f"{type(e).__name__}: {e}"[:500]


class Server:
    """One vLLM process group writing into one log file (appended to: a restart continues the same file)."""

    def __init__(self, case: Case, port: int, log: Path, env: dict[str, str], argv: list[str]) -> None:
        self.case, self.port, self.log, self.env, self.argv = case, port, log, env, argv
        self.proc: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        f = open(self.log, "ab")  # noqa: SIM115 - owned by the process / pump
        if self.case.tty:
            master, slave = pty.openpty()
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=self.env, start_new_session=True
            )
            os.close(slave)

            def pump() -> None:
                while True:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    f.write(chunk)
                    f.flush()
                f.close()

            self._pump = threading.Thread(target=pump, daemon=True)
            self._pump.start()
        else:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
            f.close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self, limit: float) -> tuple[bool, float | None]:
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if self.proc is not None and self.proc.poll() is not None:
                return False, None
            if http(self.url("/health"), timeout=2.0)[0] == 200:
                return True, round(time.monotonic() - t0, 1)
            time.sleep(1.0)
        return False, None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 40.0) -> int | None:
        self.signal(signal.SIGINT)
        try:
            if self.proc is not None:
                self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(10)
        if self._pump is not None:
            self._pump.join(5)
        return self.proc.returncode if self.proc is not None else None

    def engine_pids(self) -> list[int]:
        """The EngineCore processes of this server's group (vLLM names them `VLLM::EngineCore` via setproctitle)."""
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if os.getpgid(int(d.name)) != self.proc.pid:  # type: ignore[union-attr]
                    continue
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            except (OSError, ProcessLookupError):
                continue
            if "EngineCore" in cmd:
                pids.append(int(d.name))
        return pids


def requests_for(case: Case) -> list[tuple[str, dict]]:
    base = {"model": SERVED, "max_tokens": 16, "temperature": 0}
    reqs = [
        ("/v1/completions", {**base, "prompt": "The capital of France is"}),
        ("/v1/completions", {**base, "prompt": "1, 2, 3, 4,", "max_tokens": 24}),
        ("/v1/chat/completions", {**base, "messages": [{"role": "user", "content": "What is 12 + 30?"}]}),
    ]
    if case.client_text:
        for line in FAKE_LINES:
            reqs.append(("/v1/completions", {**base, "prompt": line, "stop": [line[:40]]}))
            reqs.append(("/v1/completions", {**base, "prompt": "\n" + line + "\n" + line}))
    return reqs


def config_line(log: Path) -> list[str]:
    """vLLM's engine config lines as printed (colour codes dropped), one per engine start."""
    text = log.read_bytes().decode("utf-8", "replace")
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return [ln.strip() for ln in text.splitlines() if "Initializing a V1 LLM engine" in ln and "with config:" in ln][:4]


def run_case(case: Case, a: argparse.Namespace, port: int, out: Path) -> dict:
    site = Path(a.site)
    log = out / f"{case.name}.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=f"{site}/vllm-{case.release}:{site}/common",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_USE_FLASHINFER_SAMPLER="0",
        VLLM_CACHE_ROOT=str(Path(a.scratch) / case.name / "vllm-cache"),
        TORCHINDUCTOR_CACHE_DIR=str(Path(a.scratch) / case.name / "inductor"),
        PYTHONUNBUFFERED="1",
    )
    for k, v in case.env.items():
        if v.startswith("@"):
            p = Path(a.scratch) / case.name / v[1:]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(LOGGING_CONFIG))
            v = str(p)
        env[k] = v
    if case.cuda_limit_gib:
        # A sitecustomize that limits this process tree's CUDA caching allocator when CUDA initializes (lazily, so
        # vLLM's start-up is unchanged): a real out-of-memory at whatever step needs more, other servers untouched.
        hook = Path(a.scratch) / case.name / "hook"
        hook.mkdir(parents=True, exist_ok=True)
        (hook / "sitecustomize.py").write_text(
            "import os\n"
            "_gib = float(os.environ.get('CORPUS_CUDA_LIMIT_GIB', '0'))\n"
            "if _gib:\n"
            "    import torch\n"
            "    def _limit():\n"
            "        total = torch.cuda.get_device_properties(0).total_memory\n"
            "        torch.cuda.set_per_process_memory_fraction(min(1.0, _gib * 2**30 / total))\n"
            "    torch.cuda._lazy_call(_limit)\n"
        )
        env["PYTHONPATH"] = f"{hook}:{env['PYTHONPATH']}"
        env["CORPUS_CUDA_LIMIT_GIB"] = str(case.cuda_limit_gib)
    sizing = ["--kv-cache-memory-bytes", KV_BYTES, "--gpu-memory-utilization", SMALL_UTIL] if case.sized else []
    if any(x == "--kv-cache-memory-bytes" for x in case.args):
        sizing = ["--gpu-memory-utilization", SMALL_UTIL]
    if case.entry == "api_server" or a.entry == "api_server":
        argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", a.model]
    else:
        argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", a.model]
    argv += ["--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port), *COMMON, *sizing, *case.args]
    facts: dict = {
        "case": case.name,
        "note": case.note,
        "release": case.release,
        "argv": ["vllm", "serve", "MODEL", *argv[5:]] if case.entry == "serve" else ["python3", *argv[1:]],
        "env": {k: env[k] for k in sorted(case.env)}
        | ({"CORPUS_CUDA_LIMIT_GIB": str(case.cuda_limit_gib)} if case.cuda_limit_gib else {}),
        "tty": case.tty,
        "life": case.life,
        "starts": [],
    }
    clock = Clock()
    starts = 2 if case.life == "restart" else 1
    for n in range(starts):
        srv = Server(case, port, log, env, argv)
        srv.start()
        say(f"{case.name}: start {n + 1}/{starts} (pid {srv.proc.pid if srv.proc else '?'})")
        ready, after = srv.wait_ready(a.ready_limit)
        rec: dict = {"ready": ready, "ready_after_s": after, "requests": []}
        if ready:
            for path, body in requests_for(case):
                code, text = http(srv.url(path), body, timeout=60.0)
                rec["requests"].append({"path": path, "status": code})
            code, _ = http(srv.url("/hipError?x=Traceback%20(most%20recent%20call%20last)"))
            rec["requests"].append({"path": "/hipError?...", "status": code})
            if case.life == "crash":
                pids = srv.engine_pids()
                rec["killed_engine_pids"] = pids
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                try:
                    srv.proc.wait(60)  # type: ignore[union-attr]
                except subprocess.TimeoutExpired:
                    pass
                rec["after_kill_health"] = http(srv.url("/health"), timeout=5.0)[0]
        rec["exit"] = srv.stop()
        rec["at_s"] = clock()
        facts["starts"].append(rec)
        say(f"{case.name}: start {n + 1} ready={ready} after={after} exit={rec['exit']}")
        if not ready:
            break
    facts["vllm_config_lines"] = config_line(log)
    facts["log_bytes"] = log.stat().st_size if log.exists() else 0
    (out / f"{case.name}.facts.json").write_text(json.dumps(facts, indent=1) + "\n")
    shutil.rmtree(Path(a.scratch) / case.name, ignore_errors=True)
    return facts


# -- scheduling --------------------------------------------------------------------------------------------------


def site_ready(site: Path, release: str) -> bool:
    return (site / "common" / ".ready").exists() and (site / f"vllm-{release}" / ".ready").exists()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="print the cases")
    r = sub.add_parser("run", help="record the cases (all, or those named)")
    r.add_argument("names", nargs="*")
    r.add_argument("--site", default="/tmp/site")
    r.add_argument("--model", default="/tmp/models/smollm2-135m-instruct")
    r.add_argument("--out", default="/tmp/corpus")
    r.add_argument("--scratch", default="/tmp/corpus-scratch")
    r.add_argument("--parallel", type=int, default=12)
    r.add_argument("--ready-limit", type=float, default=420.0, help="seconds a server may take to answer /health")
    r.add_argument("--first-port", type=int, default=8200)
    r.add_argument(
        "--entry",
        choices=("case", "api_server"),
        default="case",
        help="api_server: every case through the API server module (a smoke run on a vLLM CPU build, whose "
        "`vllm serve` needs its own distribution name)",
    )
    a = ap.parse_args()
    all_cases = cases()
    if a.cmd == "list":
        for c in all_cases:
            print(f"{c.name:32} {c.release:7} {'sized' if c.sized else 'profiled'} {c.life:7} {c.note}")
        return 0
    todo = [c for c in all_cases if not a.names or c.name in a.names]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    site = Path(a.site)
    lock = threading.Lock()
    running: dict[str, threading.Thread] = {}
    profiling = threading.Semaphore(1)  # cases sized by memory profiling run one at a time
    ports = iter(range(a.first_port, a.first_port + 1000))
    summary: list[dict] = []

    def worker(c: Case, port: int) -> None:
        try:
            if not c.sized:
                with profiling:
                    facts = run_case(c, a, port, out)
            else:
                facts = run_case(c, a, port, out)
            with lock:
                summary.append({"case": c.name, "ready": [s["ready"] for s in facts["starts"]]})
        except Exception as e:  # noqa: BLE001 - recorded; the corpus goes on
            say(f"{c.name}: recorder error {type(e).__name__}: {e}")
        finally:
            with lock:
                running.pop(c.name, None)

    pending = list(todo)
    while pending or running:
        with lock:
            free = a.parallel - len(running)
        started = False
        for c in list(pending):
            if free <= 0:
                break
            if not site_ready(site, c.release):
                continue
            pending.remove(c)
            t = threading.Thread(target=worker, args=(c, next(ports)), daemon=True)
            with lock:
                running[c.name] = t
            t.start()
            free -= 1
            started = True
            time.sleep(2.0)  # stagger process starts a little
        if not started:
            time.sleep(2.0)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    say(f"done: {len(summary)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
