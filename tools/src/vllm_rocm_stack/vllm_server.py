"""A real vLLM server (the CPU build) as a child process: for `make run`, the live tests and the bench."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from vllm_rocm_qualify.logs import serving_ports
from vllm_rocm_qualify.processes import ManagedProcess, wait_until
from vllm_rocm_qualify.server import server_env as qualify_server_env

from .config import REPO, WORK

VLLM_PYTHON = WORK / "vllm-venv" / "bin" / "python"


# The CPU build's KV cache, explicit: its default (a share of the machine's memory) trips a NUMA memory check on a
# small machine. 128 MiB holds 5,760 tokens of SmolLM2-135M (2.8 requests of 2,048; vLLM 0.32.0's log), and keeps a
# server at ~2.8 GB (the PSS of its three processes, measured; 3.7 GB with vLLM's legacy VLLM_CPU_KVCACHE_SPACE=1,
# whose unit is a GiB): the test sessions run several servers side by side on a 24 GB machine.
KV_CACHE_BYTES = 128 * 1024 * 1024
CPU_ARGS = ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
# The CPU build's threads: one OpenMP thread per server, placed by the kernel. vLLM 0.32.0's default
# (VLLM_CPU_OMP_THREADS_BIND=auto, utils/ompmultiprocessing.py) binds every server's worker, all its threads, to the
# same core (core 0 of 2, the other reserved), so the servers a test session runs side by side, in containers and pods
# too, queue on one core while a busy neighbour gets the other; and the engine core busy-waits on the slower worker.
# Measured beside a CPU hog on 2 cores (2026-12-06): three servers answering six 64-token requests each took 35.5 s
# unbound against 51.1 s bound, one server 15.3 s and 16.6 CPU-s against 24.5 s and 30.0 CPU-s. `nobind` alone keeps
# torch's two threads, which the worker may not lower: 251 s and 427 CPU-s for the three. The vllm-cpu stand-in
# image sets the same (images/standin.py), for the containers and pods.
# And torch.compile's cache as the CPU build can read it back: vLLM 0.32.0's default AOT path (VLLM_USE_AOT_COMPILE=1
# from torch 2.10 on; the lock has 2.13) saves the compiled model under VLLM_CACHE_ROOT but fails to load it on this
# build ("Compiling model again due to a load failure ... 'function' object has no attribute 'finalize_loading'",
# compilation/decorators.py), so every start in a compile mode compiled again. Without it a start reads inductor's
# cache (TORCHINDUCTOR_CACHE_DIR) and only traces: 51 CPU-s with a warm cache against 97, the same cold (110-131
# against 119-120; SmolLM2-135M, idle 2-core machine, 2026-12-06). That is a compile-mode server started again on its
# cache (`make run` without --enforce-eager, a restarted container or pod). The test suite has no such start: its
# servers run eager or -O0, and its two compile-mode starts in pods (the node tests' qualification Job, under
# qualify's own cache, and the pod rolled out onto its report) run without inductor (images/standin.py, STANDIN_ENV).
CPU_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1", "VLLM_USE_AOT_COMPILE": "0"}


def qualify_args() -> list[str]:
    """`vllm-rocm qualify run`'s arguments for this build's servers: each one's KV cache and CPU_ENV, as `make qualify`
    and the live tests pass them."""
    return ["--kv-cache-bytes", str(KV_CACHE_BYTES), *(a for k, v in CPU_ENV.items() for a in ("--env", f"{k}={v}"))]


def server_env(cache: Path) -> dict[str, str]:
    """qualify's server environment (offline, caches under `cache`) with the CPU build's settings (CPU_ENV)."""
    return {**qualify_server_env(cache), **CPU_ENV}


class VllmServer:
    def __init__(
        self,
        model: Path,
        served_model_name: str,
        port: int,
        log_path: Path,
        enforce_eager: bool = True,
        extra_args: list[str] | None = None,
        python: Path = VLLM_PYTHON,
        max_model_len: int = 2048,
    ) -> None:
        self.model = model
        self.served_model_name = served_model_name
        self.port = port
        self.log_path = log_path
        self.python = python
        argv = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(max_model_len),
            "--dtype",
            "bfloat16",
            "--seed",
            "0",
            *CPU_ARGS,
        ]
        if enforce_eager:
            argv.append("--enforce-eager")
        argv += list(extra_args or [])
        self.process = ManagedProcess(
            f"vLLM ({served_model_name})", argv, log_path, env=server_env(WORK / "cache"), cwd=REPO
        )
        self.startup_seconds = 0.0
        self._log_from = 0  # where this start's lines begin in the log (ManagedProcess appends)
        self.foreign = False  # /health answered before this start's log said it serves

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        if not self.process.alive():
            raise RuntimeError(
                f"vLLM exited with {self.process.returncode()} during start-up; log tail:\n{self.process.log_tail(40)}"
            )
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                if r.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        if self.serves():
            return True
        self.foreign = True
        return False

    def serves(self) -> bool:
        """Whether this start's log says the server serves: what answers on its port is then this server, not a
        process the port went to between free_port() and the bind (vllm_rocm_qualify.server says more)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_from)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return False
        return bool(serving_ports(text))

    def start(self, timeout: float = 600.0, progress: Callable[[float], None] | None = None) -> None:
        if not self.python.exists():
            raise RuntimeError(f"{self.python} missing: run `make setup-vllm`")
        if not (self.model / "config.json").is_file():
            raise RuntimeError(f"model {self.model} missing: run `make setup-vllm`")
        t0 = time.monotonic()
        self.foreign = False
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.process.start()
        try:
            ok = wait_until(self.healthy, timeout, interval=0.5, on_tick=progress)
        except BaseException:  # exited early, Ctrl-C, or a test runner's timeout: never leave it running
            self.process.stop(timeout=10)
            raise
        if not ok:
            tail = self.process.log_tail(40)
            self.process.stop(timeout=10)
            why = (
                f"/health on port {self.port} answered, but the log never said vLLM serves: another process holds "
                "the port"
                if self.foreign
                else "not healthy"
            )
            raise RuntimeError(f"vLLM was not ready within {timeout:.0f} s ({why}); log tail:\n{tail}")
        self.startup_seconds = time.monotonic() - t0

    def alive(self) -> bool:
        return self.process.alive()

    def last_log_line(self) -> str:
        tail = self.process.log_tail(5).replace("\r", "\n").strip().splitlines()
        return tail[-1].strip() if tail else ""

    def stop(self) -> int | None:
        # SIGINT is vLLM's clean shutdown (it logs a benign EngineDeadError); the engine core needs a few seconds.
        return self.process.stop(timeout=30)
