"""What a vLLM server's log says about CUDA graphs, line by line, for vLLM 0.10.x to 0.33.

Each line is matched on message text (not on `[file:line]`, which changes between releases), after the
substring prefilter of `prefilter.py`: nearly all lines of a busy server are request and stats lines.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .prefilter import line_may_matter

MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# <=0.11 prints the enum's value in JSON; see the shared notes, section 0.
_JSON_MODE = {"0": "NONE", "1": "PIECEWISE", "2": "FULL", "[2,0]": "FULL_DECODE_ONLY", "[2,1]": "FULL_AND_PIECEWISE"}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONFIG_JSON_MODE = re.compile(r'"cudagraph_mode":\s*(\[\s*\d\s*,\s*\d\s*\]|\d)')
_CONFIG_DICT_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+):")
_ARGS_MODE = re.compile(r"""cudagraph_mode['"]?\s*[:=]\s*(?:<CUDAGraphMode\.)?['"]?(\w+)""")
_ENFORCE_EAGER = re.compile(r"""enforce_eager['"]?\s*[:=]\s*True""")
_DOWNGRADE = re.compile(
    r"CUDAGraphMode\.(\w+) is not supported (?:with spec-decode for attention backend (\w+)|with (\w+) backend)"
    r" \(support: ?AttentionCGSupport\.(\w+)\)\s*;\s*setting cudagraph_mode=(\w+)")
_UNSUPPORTED_RAISE = re.compile(
    r"CUDAGraphMode\.(\w+) is not supported with (\w+) backend \(support: ?AttentionCGSupport\.(\w+)\)"
    r"\s*;\s*please try")
_BAR = re.compile(
    r"Capturing CUDA graphs \((?:(mixed prefill-decode|decode), )?(PIECEWISE|FULL)\)[^|]*\|[^|]*\|\s*(\d+)/(\d+)")
_BAR_START = re.compile(r"Capturing CUDA graphs \((?:(mixed prefill-decode|decode), )?(PIECEWISE|FULL)\)")
_FINISHED = re.compile(r"Graph capturing finished in (\d+) secs?, took (-?[\d.]+) GiB")
_PROFILED = re.compile(r"Profiling CUDA graph memory: (.*)")
_PROFILED_ITEM = re.compile(r"\b(PIECEWISE|FULL)=(\d+)")
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
_BACKEND_ENUM = re.compile(
    r"(?:Using ([A-Z][A-Z0-9_]+) backend (?:\(selected via --attention-backend\)|out of potential backends)"
    r"|Overriding with ([A-Z][A-Z0-9_]+) out of potential backends)")
# The engine config line (VllmConfig.__str__, 0.10-0.33): the facts the known-issues data conditions on.
_CFG_QUANT = re.compile(r"\bquantization=([\w.-]+)")
_CFG_KV = re.compile(r"\bkv_cache_dtype=([\w.-]+)")
_CFG_TP = re.compile(r"\btensor_parallel_size=(\d+)")
_CFG_SPEC = re.compile(r"\bspeculative_config=(?:None|SpeculativeConfig\(method='([\w-]+)')")
_ARGS_MAX_SEQS = re.compile(r"""['"]max_num_seqs['"]\s*:\s*(\d+)""")
# What the distribution's image entrypoint (docker/scripts/vllm-serve.sh) prints before vLLM starts: patches,
# ROCm version and the VLLM_ROCM_* environment, none of which vLLM logs itself.
FACTS_PREFIX = "vllm-rocm facts: "

_OVERRIDE = re.compile(r"(?:Overriding (?:cudagraph_mode (?:%s |\w+ )?(?:from \w+ )?)?to|Setting cudagraph_mode to)"
                       r" (NONE|PIECEWISE|FULL_DECODE_ONLY|FULL_AND_PIECEWISE|FULL)\b")


@dataclass(frozen=True)
class Event:
    """One fact a line established. `kind` is one of the names below; the other fields depend on it."""
    kind: str
    mode: str = ""       # requested / effective / bar mode
    phase: str = ""      # decode | mixed | unspecified
    done: int = 0
    total: int = 0
    seconds: float = 0.0
    gib: float = 0.0
    reason: str = ""
    text: str = ""


# Event kinds
ENGINE_START = "engine_start"        # a new engine config line: mode = requested (config stage), text = version
REQUESTED = "requested"              # mode from non-default args
EAGER = "eager"
DOWNGRADE = "downgrade"              # mode = effective, text = requested
KV_CACHE = "kv_cache"                # `Available KV cache memory`: after it, a capture is the real one
BAR = "bar"                          # capture progress: phase, mode, done, total
FINISHED = "finished"                # seconds, gib
FAILURE = "failure"                  # reason: oom | gpu_error | exception | engine_failed
SKIPPED = "skipped"                  # capture skipped (mode NONE)
PROFILED = "profiled"                # 0.20+ V1 graph-memory profiling: mode = what will be captured (resolved)
BACKEND = "backend"                  # attention backend selected: text = vLLM's enum name
CONFIG = "config"                    # engine config facts: text = JSON {quantization, kv_cache_dtype, ...}
ARGS = "args"                        # non-default args facts: text = JSON {max_num_seqs}
FACTS = "facts"                      # the image entrypoint's facts line: text = its JSON object

_PHASE = {"mixed prefill-decode": "mixed", "decode": "decode", None: "unspecified"}


def clean(line: str) -> str:
    """Drop colour codes and keep the last `\\r` segment (tqdm redraws)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return line.rstrip("\r\n")


def parse_line(raw: str) -> list[Event]:
    """All events one physical line carries (tqdm may put several bar updates on one line with \\r)."""
    if not line_may_matter(raw):
        return []
    line = clean(raw)
    if "\r" in line:
        out: list[Event] = []
        for part in line.split("\r"):
            out.extend(_parse_one(part))
        return out
    return _parse_one(line)


def _parse_one(line: str) -> list[Event]:
    if "Capturing CUDA graphs" in line:
        m = _BAR.search(line)
        if m:
            return [Event(BAR, mode=m.group(2), phase=_PHASE[m.group(1)], done=int(m.group(3)), total=int(m.group(4)))]
        m = _BAR_START.search(line)
        if m:
            return [Event(BAR, mode=m.group(2), phase=_PHASE[m.group(1)])]
        return []
    if "Graph capturing finished" in line:
        m = _FINISHED.search(line)
        return [Event(FINISHED, seconds=float(m.group(1)), gib=float(m.group(2)))] if m else []
    if "Initializing a V1 LLM engine" in line:
        version = line.split("engine (v", 1)[1].split(")", 1)[0] if "engine (v" in line else ""
        events = [Event(ENGINE_START, mode=_config_mode(line), text=version)]
        facts = _config_facts(line)
        if facts:
            events.append(Event(CONFIG, text=json.dumps(facts, sort_keys=True)))
        if "enforce_eager=True" in line:
            events.append(Event(EAGER, text="enforce_eager=True"))
        return events
    if FACTS_PREFIX in line:
        try:
            facts = json.loads(line.split(FACTS_PREFIX, 1)[1])
        except ValueError:
            return []
        return [Event(FACTS, text=json.dumps(facts, sort_keys=True))] if isinstance(facts, dict) else []
    if ("backend" in line and "Using " in line) or "Overriding with" in line:
        backend = _backend(line)
        if backend:
            return [Event(BACKEND, text=backend)]
    if "non-default args" in line:
        events = []
        m = _ARGS_MODE.search(line)
        if m and m.group(1).upper() in MODES:
            events.append(Event(REQUESTED, mode=m.group(1).upper()))
        elif m and m.group(1) in ("0", "1", "2"):
            events.append(Event(REQUESTED, mode=_JSON_MODE[m.group(1)]))
        if _ENFORCE_EAGER.search(line):
            events.append(Event(EAGER, text="--enforce-eager"))
        m = _ARGS_MAX_SEQS.search(line)
        if m:
            events.append(Event(ARGS, text=json.dumps({"max_num_seqs": int(m.group(1))})))
        return events
    if "is not supported" in line and "CUDAGraphMode." in line:
        m = _DOWNGRADE.search(line)
        if m:
            return [Event(DOWNGRADE, mode=m.group(5), text=m.group(1), reason=m.group(2) or m.group(3) or "")]
        m = _UNSUPPORTED_RAISE.search(line)
        if m:
            # The ValueError that aborts start-up: its traceback follows; count it once, as an exception.
            return [Event(FAILURE, reason="exception", text=line[-300:])]
        return []
    if "Profiling CUDA graph memory" in line:
        m = _PROFILED.search(line)
        counts = {k: int(n) for k, n in _PROFILED_ITEM.findall(m.group(1))} if m else {}
        pw, full = counts.get("PIECEWISE", 0) > 0, counts.get("FULL", 0) > 0
        mode = "FULL_AND_PIECEWISE" if pw and full else "PIECEWISE" if pw else "FULL" if full else "NONE"
        return [Event(PROFILED, mode=mode)] if m else []
    if ("Overriding" in line or "Setting cudagraph_mode" in line) and "cudagraph" in line.lower():
        m = _OVERRIDE.search(line)
        return [Event(DOWNGRADE, mode=m.group(1), reason="config override")] if m else []
    if "Cudagraph is disabled under eager mode" in line or "Enforce eager set" in line:
        return [Event(EAGER, text="eager mode")]
    if "Skipping CUDA graph capture" in line or "Skipping encoder and decoder CUDA graph capture" in line:
        return [Event(SKIPPED)]
    if "Available KV cache memory" in line:
        return [Event(KV_CACHE)]
    if "out of memory" in line and ("CUDA out of memory" in line or "HIP out of memory" in line
                                    or "OutOfMemoryError" in line):
        return [Event(FAILURE, reason="oom", text=line[-300:])]
    if "HIP error" in line or "CUDA error" in line or "hipError" in line:
        return [Event(FAILURE, reason="gpu_error", text=line[-300:])]
    if "EngineCore failed to start" in line or "Engine core initialization failed" in line:
        return [Event(FAILURE, reason="engine_failed", text=line[-300:])]
    if line.startswith("Traceback") or ") Traceback (most recent call last)" in line or \
            line.endswith("Traceback (most recent call last):"):
        return [Event(FAILURE, reason="exception", text="traceback")]
    return []


def _config_mode(line: str) -> str:
    m = _CONFIG_DICT_MODE.search(line)
    if m:
        return m.group(1)
    m = _CONFIG_JSON_MODE.search(line)
    if m:
        return _JSON_MODE.get(re.sub(r"\s", "", m.group(1)), "unknown")
    return "unknown"


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


def _config_facts(line: str) -> dict:
    """quantization, kv_cache_dtype, speculative method and TP size from the engine config line ("none" when
    vLLM prints None; a key is absent when the line does not carry it)."""
    out: dict = {}
    m = _CFG_QUANT.search(line)
    if m:
        out["quantization"] = "none" if m.group(1) == "None" else m.group(1)
    m = _CFG_KV.search(line)
    if m:
        out["kv_cache_dtype"] = m.group(1)
    m = _CFG_TP.search(line)
    if m:
        out["tensor_parallel_size"] = int(m.group(1))
    m = _CFG_SPEC.search(line)
    if m:
        out["speculative_method"] = m.group(1) or "none"
    return out
