"""What a vLLM server's log says about CUDA graphs, line by line, for vLLM 0.10.x to 0.33.

Only vLLM's own lines are events (logline.py): each event is the start of a logger message from the module that
logs it (the `[file.py:N]` name, stable across releases while the line number is not), or the start of a raw line
(capture bars, tracebacks). Client text (access lines, logged prompts and stop strings) never starts a message,
so it can neither fake a restart nor a GPU error. Every lines first goes through the substring prefilter of
`prefilter.py`: nearly all lines of a busy server are request and stats lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from vllm_rocm_known_issues.evaluator import MODES

from . import configline, logline
from .logline import LogLine
from .prefilter import line_may_matter

_DOWNGRADE = re.compile(
    r"CUDAGraphMode\.(\w+) is not supported (?:with spec-decode for attention backend (\w+)|with (\w+) backend)"
    r" \(support: ?AttentionCGSupport\.(\w+)\)\s*;\s*setting cudagraph_mode=(\w+)"
)
_UNSUPPORTED_RAISE = re.compile(
    r"CUDAGraphMode\.(\w+) is not supported with (\w+) backend \(support: ?AttentionCGSupport\.(\w+)\)"
    r"\s*;\s*please try"
)
_BAR = re.compile(
    r"Capturing CUDA graphs \((?:(mixed prefill-decode|decode), )?(PIECEWISE|FULL)\)"
    r"[^|]*\|[^|]*\|\s*(\d{1,9})/(\d{1,9})"
)
_BAR_START = re.compile(r"Capturing CUDA graphs \((?:(mixed prefill-decode|decode), )?(PIECEWISE|FULL)\)")
_FINISHED = re.compile(r"Graph capturing finished in (\d{1,9}) secs?, took (-?\d{1,9}(?:\.\d{1,9})?) GiB")
_PROFILED_ITEM = re.compile(r"\b(PIECEWISE|FULL)=(\d{1,9})")
# Config/resolution-stage overrides (notes §2c step 4 and §2d): "Overriding cudagraph_mode [from X ]to Y",
# "Overriding to Y.", "Setting cudagraph_mode to Y".
# Attention backend selection (platforms/rocm.py): prose up to 0.14, the enum name from 0.20 on. ViT / encoder
# lines ("... for ViT model", "for vit attention") name another backend and are skipped.
_BACKEND_PROSE = (
    ("Using Flash Attention backend on V1 engine", "ROCM_AITER_FA"),  # <=0.11 on ROCm: the AITER FA backend
    ("Using Aiter Flash Attention backend", "ROCM_AITER_FA"),  # 0.14
    ("Using Triton Attention backend", "TRITON_ATTN"),
    ("Using Rocm/Aiter Attention backend on V1 engine", "ROCM_ATTN"),  # 0.11
    ("Using Rocm Attention backend", "ROCM_ATTN"),  # 0.14
    ("Using Aiter Unified Attention backend", "ROCM_AITER_UNIFIED_ATTN"),  # 0.14
    ("Using AITER TRITON MLA backend", "ROCM_AITER_TRITON_MLA"),  # 0.14
    ("Using AITER MLA backend", "ROCM_AITER_MLA"),
    ("Using Triton MLA backend", "TRITON_MLA"),
)
# 0.26.0 cuda.py:483 `Using FLASH_ATTN attention backend out of potential backends: [...]` and :422 `Using
# AttentionBackendEnum.TRITON_ATTN backend.` (--attention-backend); rocm.py:571/:625 without `attention `.
_BACKEND_ENUM = re.compile(
    r"(?:Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend"
    r"(?: \(selected via --attention-backend\)| out of potential backends|\.$)"
    r"|Overriding with ([A-Z][A-Z0-9_]+) out of potential backends)"
)
# What the distribution's image entrypoint (docker/scripts/vllm-serve.sh) prints before vLLM starts: patches,
# ROCm version and the VLLM_ROCM_* environment, none of which vLLM logs itself.
FACTS_PREFIX = "vllm-rocm facts: "

_OVERRIDE = re.compile(
    r"(?:Overriding (?:cudagraph_mode (?:%s |\w+ )?(?:from \w+ )?)?to|Setting cudagraph_mode to)"
    r" (" + "|".join(sorted(MODES, key=len, reverse=True)) + r")\b"
)  # longest first


@dataclass(frozen=True)
class Event:
    """One fact a line established. `kind` is one of the names below; the other fields depend on it."""

    kind: str
    mode: str = ""  # requested / effective / bar mode
    phase: str = ""  # decode | mixed | unspecified
    done: int = 0
    total: int = 0
    seconds: float = 0.0
    gib: float = 0.0
    reason: str = ""
    text: str = ""


# Event kinds
ENGINE_START = "engine_start"  # a new engine config line: mode = requested (config stage), text = version
REQUESTED = "requested"  # mode from non-default args
EAGER = "eager"
DOWNGRADE = "downgrade"  # mode = effective, text = requested
KV_CACHE = "kv_cache"  # the KV cache is sized (profiled or --kv-cache-memory-bytes): a capture after it is the real one
BAR = "bar"  # capture progress: phase, mode, done, total
FINISHED = "finished"  # seconds, gib
FAILURE = "failure"  # reason: oom | gpu_error | exception | engine_failed | engine_died
SKIPPED = "skipped"  # capture skipped (mode NONE)
PROFILED = "profiled"  # 0.20+ V1 graph-memory profiling: mode = what will be captured (resolved)
BACKEND = "backend"  # attention backend selected: text = vLLM's enum name
CONFIG = "config"  # engine config facts (configline.engine_facts): text = JSON {cudagraph_mode, quantization, ...}
CONFIG_ERROR = "config_error"  # the engine config line does not read as vLLM's structure: reason = why
API_VERSION = "api_version"  # the API server's version line (`vLLM API server version X`, the banner): text = X
ARGS = "args"  # non-default args facts: text = JSON {max_num_seqs}
FACTS = "facts"  # the image entrypoint's facts line: text = its JSON object
PLATFORM = "platform"  # `Automatically detected platform rocm.`: text = the platform
ARCHITECTURE = "architecture"  # `Resolved architecture: LlamaForCausalLM`: text = the model's architecture
SHUTDOWN = "shutdown"  # `[shutdown] ...` (0.32+): vLLM stops this engine (teardown tracebacks follow)

_PHASE = {"mixed prefill-decode": "mixed", "decode": "decode", None: "unspecified"}

# Where vLLM logs each kind of event (the `[file.py:N]` of its logger header), as the releases 0.10.1.1 to 0.33.0
# print it (shared notes §2-§4; tests/health/test_logparse.py checks the fixtures and the real 0.26/0.32 logs).
# A line from any other module (the request path: serving_*.py, logger.py, api_server.py) is never an event.
_SRC_ENGINE = frozenset({"core.py"})
_SRC_ARGS = frozenset(
    {"utils.py", "api_utils.py", "startup.py", "arg_utils.py", "cli_args.py", "main.py", "serve.py", "api_server.py"}
)
_SRC_PLATFORM = frozenset({"__init__.py"})
_SRC_BACKEND = frozenset({"rocm.py", "cuda.py", "cpu.py", "xpu.py", "selector.py", "interface.py"})
_SRC_RESOLVE = frozenset(
    {
        "gpu_model_runner.py",
        "model_runner.py",
        "compilation.py",
        "cudagraph_utils.py",
        "vllm.py",
        "config.py",
        "__init__.py",
        "model.py",
        "rocm.py",
        "cuda.py",
        "interface.py",
    }
)
_SRC_CAPTURE = frozenset({"gpu_model_runner.py", "model_runner.py", "cudagraph_utils.py", "cpu_model_runner.py"})
_SRC_KV = frozenset({"gpu_worker.py", "cpu_worker.py", "worker.py", "kv_cache_utils.py"})
_SRC_FAILURE = frozenset(
    {
        "core.py",
        "utils.py",
        "core_client.py",
        "multiproc_executor.py",
        "gpu_worker.py",
        "gpu_model_runner.py",
        "model_runner.py",
        "cpu_worker.py",
        "async_llm.py",
        "llm_engine.py",
    }
)

_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([0-9][0-9A-Za-z.+!_-]{0,63})\) with config: ")
# The API server's own version line, before any engine starts: `vLLM API server version 0.9.2` (0.9.2
# entrypoints/openai/api_server.py:1395) or the banner's `... █ ▀▄▀ █  version 0.26.0` (0.22.1 entrypoints/utils.py,
# 0.26.0 serve/utils/api_utils.py). What an excerpt without the engine line still says.
_API_VERSION = re.compile(r"(?:vLLM API server version | ?\S.{0,80}█  version )([0-9][0-9A-Za-z.+!_-]{0,63})$")
_SRC_VERSION = frozenset({"api_server.py", "utils.py", "api_utils.py"})
_PLATFORM = re.compile(r"Automatically detected platform ([a-z]{1,16})\.")
# 0.10.2 config/__init__.py:742, 0.14.0 config/model.py:530, 0.32.0 model.py:733, 0.34.0 :761 (the API server's)
_ARCHITECTURE = re.compile(r"Resolved architecture: ([A-Za-z][A-Za-z0-9_]{0,99})$")
_SRC_MODEL = frozenset({"__init__.py", "model.py", "config.py"})
# 0.32.0: launcher.py:254 `[shutdown] API server: shutdown triggered`, core.py:1454 `[shutdown] EngineCore: trigger
# received signal=...`, core_client.py:770 `[shutdown] MPClient: start ...` (fixtures/v0.32.0-cpu-restart-real.log)
_SRC_SHUTDOWN = frozenset({"launcher.py", "core.py", "core_client.py"})
# The start of an exception line of a traceback that says the GPU failed; anchored, so a request error whose
# message merely mentions "HIP error" is not one.
_OOM = re.compile(r"(?:torch\.(?:cuda\.)?OutOfMemoryError|OutOfMemoryError|RuntimeError): (?:CUDA|HIP) out of memory")
_GPU_ERROR = re.compile(
    r"(?:(?:RuntimeError|torch\.AcceleratorError|torch\.cuda\.CudaError): )?(?:CUDA|HIP) error: "
    r"|Memory access fault by GPU node-\d"
)
_ENGINE_FAILED = re.compile(r"(?:RuntimeError: )?(?:EngineCore failed to start|Engine core initialization failed)")
TRACEBACK = "Traceback (most recent call last):"


def parse_line(raw: str) -> list[Event]:
    """All events one physical line carries (tqdm may put several bar updates on one line with \\r)."""
    return parse(raw)[1]


def parse(raw: str) -> tuple[LogLine | None, list[Event]]:
    """The line split at vLLM's own prefix (None when the prefilter skipped it), and the events it carries."""
    if not line_may_matter(raw):
        return None, []
    line = logline.split(raw)
    return line, (_parse_logger(line) if line.level else _parse_raw(line))


def _parse_raw(line: LogLine) -> list[Event]:
    """Raw lines: capture bars (each `\\r` segment must start with one), tracebacks, the image's facts line."""
    msg = line.message
    if msg.lstrip("\r").startswith("Capturing CUDA graphs ("):  # tqdm starts each redraw with \r (real 0.26 logs)
        out: list[Event] = []
        for part in msg.split("\r"):
            if part.startswith("Capturing CUDA graphs ("):
                out.extend(_bar(part))
        return out
    if msg.startswith(FACTS_PREFIX) and not line.proc:
        try:
            facts = json.loads(msg[len(FACTS_PREFIX) :])
        except ValueError:
            return []
        return [Event(FACTS, text=json.dumps(facts, sort_keys=True))] if isinstance(facts, dict) else []
    return _failure(msg)


def _failure(msg: str) -> list[Event]:
    """A failure, from a traceback (raw or through the logger) or the engine's own failure lines."""
    if msg.startswith(TRACEBACK):
        return [Event(FAILURE, reason="exception", text="traceback")]
    if _OOM.match(msg):
        return [Event(FAILURE, reason="oom", text=msg[:300])]
    if _GPU_ERROR.match(msg):
        return [Event(FAILURE, reason="gpu_error", text=msg[:300])]
    if _ENGINE_FAILED.match(msg):
        return [Event(FAILURE, reason="engine_failed", text=msg[:300])]
    if msg.startswith("ValueError: CUDAGraphMode.") and _UNSUPPORTED_RAISE.match(msg, len("ValueError: ")):
        # The ValueError that aborts start-up: its traceback follows; count it once, as an exception.
        return [Event(FAILURE, reason="exception", text=msg[:300])]
    return []


def _bar(part: str) -> list[Event]:
    m = _BAR.match(part)
    if m:
        return [Event(BAR, mode=m.group(2), phase=_PHASE[m.group(1)], done=int(m.group(3)), total=int(m.group(4)))]
    m = _BAR_START.match(part)
    return [Event(BAR, mode=m.group(2), phase=_PHASE[m.group(1)])] if m else []


def _parse_logger(line: LogLine) -> list[Event]:
    msg, src = line.message, line.source
    if src in _SRC_CAPTURE and msg.startswith("Graph capturing finished"):
        m = _FINISHED.match(msg)
        return [Event(FINISHED, seconds=float(m.group(1)), gib=float(m.group(2)))] if m else []
    if src in _SRC_ENGINE and msg.startswith("Initializing a V1 LLM engine"):
        return _engine_line(msg)
    if src in _SRC_BACKEND and (msg.startswith("Using ") or msg.startswith("Found incompatible backend")):
        backend = _backend(msg)
        return [Event(BACKEND, text=backend)] if backend else []
    if src in _SRC_ARGS and msg.startswith("non-default args: "):
        try:
            facts = configline.args_facts(msg[len("non-default args: ") :])
        except configline.ConfigLineError:
            return []  # optional facts: the engine config line is the authority, and it is checked by structure
        events = []
        mode = facts.get("cudagraph_mode")
        if mode in MODES:
            events.append(Event(REQUESTED, mode=mode))
        if facts.get("enforce_eager"):
            events.append(Event(EAGER, text="--enforce-eager"))
        if "max_num_seqs" in facts:
            events.append(Event(ARGS, text=json.dumps({"max_num_seqs": facts["max_num_seqs"]})))
        return events
    if src in _SRC_MODEL and msg.startswith("Resolved architecture: "):
        m = _ARCHITECTURE.match(msg)
        return [Event(ARCHITECTURE, text=m.group(1))] if m else []
    if src in _SRC_PLATFORM and msg.startswith("Automatically detected platform"):
        m = _PLATFORM.match(msg)
        return [Event(PLATFORM, text=m.group(1))] if m else []
    if src in _SRC_RESOLVE and msg.startswith("CUDAGraphMode."):
        m = _DOWNGRADE.match(msg)
        if m:
            return [Event(DOWNGRADE, mode=m.group(5), text=m.group(1), reason=m.group(2) or m.group(3) or "")]
        if line.level in ("ERROR", "CRITICAL") and _UNSUPPORTED_RAISE.match(msg):
            return [Event(FAILURE, reason="exception", text=msg[:300])]
        return []
    if src in _SRC_CAPTURE and msg.startswith("Profiling CUDA graph memory: "):
        counts = {k: int(n) for k, n in _PROFILED_ITEM.findall(msg[:4096])}
        pw, full = counts.get("PIECEWISE", 0) > 0, counts.get("FULL", 0) > 0
        mode = "FULL_AND_PIECEWISE" if pw and full else "PIECEWISE" if pw else "FULL" if full else "NONE"
        return [Event(PROFILED, mode=mode)]
    if src in _SRC_RESOLVE and ("Overriding" in msg or "Setting cudagraph_mode" in msg) and "cudagraph" in msg.lower():
        m = _OVERRIDE.search(msg[:4096])
        return [Event(DOWNGRADE, mode=m.group(1), reason="config override")] if m else []
    if src in _SRC_RESOLVE and (
        msg.startswith("Cudagraph is disabled under eager mode") or msg.startswith("Enforce eager set")
    ):
        return [Event(EAGER, text="eager mode")]
    if src in _SRC_CAPTURE and (
        msg.startswith("Skipping CUDA graph capture")
        or msg.startswith("Skipping encoder and decoder CUDA graph capture")
    ):
        return [Event(SKIPPED)]
    if src in _SRC_KV and (
        msg.startswith("Available KV cache memory")
        or (msg.startswith("Initial free memory") and "as specified by kv_cache_memory_bytes" in msg)
    ):
        # Profiled, or given by --kv-cache-memory-bytes (0.22-0.26 gpu_worker.py: "... reserved X GiB memory for KV
        # Cache as specified by kv_cache_memory_bytes config and skipped memory profiling"): either way sized.
        return [Event(KV_CACHE)]
    if src in _SRC_VERSION:
        m = _API_VERSION.match(msg)
        if m:
            return [Event(API_VERSION, text=m.group(1))]
    if src in _SRC_SHUTDOWN and msg.startswith("[shutdown] "):
        if "engine core exited unexpectedly" in msg:
            # 0.26.0 core_client.py:703: the engine process died under a running API server (killed, crashed)
            return [Event(SHUTDOWN), Event(FAILURE, reason="engine_died", text=msg[:300])]
        return [Event(SHUTDOWN)]
    if src in _SRC_FAILURE and line.level in ("ERROR", "CRITICAL"):
        return _failure(msg)
    return []


def _backend(line: str) -> str:
    if "ViT" in line or "vit attention" in line:
        return ""
    m = _BACKEND_ENUM.search(line)
    if m:
        return m.group(1) or m.group(2)
    for text, name in _BACKEND_PROSE:
        if text in line:
            return name
    return ""


def _engine_line(msg: str) -> list[Event]:
    """The engine config line: a new engine (its version), and its facts read by structure (configline.py), or why
    they cannot be read. Never a guess: a line that does not parse gives no facts."""
    m = _VERSION.match(msg)
    if not m:
        return [Event(ENGINE_START, mode="unknown"), Event(CONFIG_ERROR, reason="not in the known format")]
    try:
        facts = configline.engine_facts(msg[m.end() :])
    except configline.ConfigLineError as exc:
        return [Event(ENGINE_START, mode="unknown", text=m.group(1)), Event(CONFIG_ERROR, reason=str(exc)[:200])]
    events = [
        Event(ENGINE_START, mode=facts["cudagraph_mode"], text=m.group(1)),
        Event(CONFIG, text=json.dumps(facts, sort_keys=True)),
    ]
    if facts.get("enforce_eager"):
        events.append(Event(EAGER, text="enforce_eager=True"))
    return events
