"""Write each corpus case's `expect` block (tools/gpu/README.md) from its command line and a plain reading of its
log text: regexes over the raw text, independent of the sidecar's parser, which tests/health/test_corpus.py checks
against these. Review every change by reading the log: where this reading and the parser disagreed (an engine that
died after its capture finished; a VLLM_LOGGING_PREFIX line that only looks standard), the log decided.

    python3 tools/gpu/expect_corpus.py [health/fixtures/corpus/h200]
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "health/fixtures/corpus/h200")
PHASE = {"mixed prefill-decode": "mixed", "decode": "decode"}
BAR = re.compile(
    r"Capturing CUDA graphs \((?:(mixed prefill-decode|decode), )?(PIECEWISE|FULL)\)[^|]*\|[^|]*\|\s*(\d+)/(\d+)"
)
for fp in sorted(root.glob("*.facts.json")):
    case = fp.name[: -len(".facts.json")]
    p = root / f"{case}.log"
    raw = p.read_bytes() if p.exists() else gzip.decompress((root / f"{case}.log.gz").read_bytes())
    text = ANSI.sub("", raw.decode("utf-8", "replace"))
    f = json.loads(fp.read_text())
    argv = f["argv"]
    asked = ""
    if "--compilation-config" in argv:
        asked = json.loads(argv[argv.index("--compilation-config") + 1]).get("cudagraph_mode", "")
    std = [
        line
        for line in text.splitlines()
        if re.match(r"(\([^)]* pid=\d+\) )?INFO \d\d-\d\d \S+ \[core\.py:\d+\] Initializing a V1 LLM engine", line)
    ]
    cfg = re.findall(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", std[-1]) if std else []
    config_mode = cfg[0] if cfg else "unknown"
    bars = {}
    for seg in re.split(r"[\r\n]", text):
        m = BAR.search(seg)
        if m:
            key = f"{PHASE.get(m.group(1), 'unspecified')}/{m.group(2)}"
            bars[key] = max(bars.get(key, 0), int(m.group(4)))
    finished = bool(re.search(r"(^|\) )INFO \S+ \S+ \[\w+\.py:\d+\] Graph capturing finished in", text, re.M))
    ready = all(s["ready"] for s in f["starts"])
    eager = config_mode == "NONE"
    failures = []
    if "Error in memory profiling" in text:
        failures = ["engine_failed", "exception"]
    if "OutOfMemoryError" in text:
        failures = ["engine_failed", "exception", "oom"]
    if "engine core exited unexpectedly" in text:
        failures = ["engine_died"]
    backend = ""
    m = std and re.search(r"\[cuda\.py:\d+\] Using (?:AttentionBackendEnum\.)?(\w+) (?:attention )?backend", text)
    if m:
        backend = m.group(1)
    kv = re.search(r"\bkv_cache_dtype=(\w+)", std[-1]).group(1) if std else ""
    spec = re.search(r"speculative_config=SpeculativeConfig\(method='(\w+)'", std[-1]) if std else None
    seqs = re.search(r"'max_num_seqs': (\d+)", text)
    if not std:
        verdict = "engine_config_unseen"
    elif failures:
        verdict = "engine_failed"
    else:
        verdict = "ok"
    expect = {
        "version": f["release"] if std else "",
        "engines": len(std),
        "config_mode": config_mode,
        "requested": asked or (config_mode if std else "unknown"),
        "effective": config_mode if std else "unknown",
        "capture_finished": bool(std)
        and finished
        and not eager
        and "engine_died" in failures + ["engine_died"] * (not failures),
        "graphs": bars if (finished and std and (not failures or failures == ["engine_died"])) else {},
        "failures": failures,
        "attention_backend": backend if std else "",
        "kv_cache_dtype": kv,
        "speculative_method": (spec.group(1) if spec else "none") if std else "",
        "max_num_seqs": int(seqs.group(1)) if seqs and std else None,
        "expected_mode": asked,
        "verdict": verdict,
    }
    f["expect"] = expect
    fp.write_text(json.dumps(f, indent=1, sort_keys=True) + "\n")
print("ok")
