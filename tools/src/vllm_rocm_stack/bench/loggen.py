"""A large, realistic vLLM server log for the parser benchmark: mostly request/access/stats lines, a few config,
capture-bar and warning lines, in the formats of the releases the sidecar supports. Seeded, so runs compare."""

from __future__ import annotations

import random
from pathlib import Path

_PREFIX = "(APIServer pid=4120) INFO 12-02 11:{m:02d}:{s:02d} [{src}] "
_ENGINE = "(EngineCore_DP0 pid=4391) INFO 12-02 11:{m:02d}:{s:02d} [{src}] "

_STARTUP = [  # (module, message) after the engine prefix; messages contain braces, so they are not format templates
    (
        "core.py:93",
        "Initializing a V1 LLM engine (v0.14.0) with config: model='meta-llama/Llama-3.1-70B-Instruct', "
        "speculative_config=None, tokenizer='meta-llama/Llama-3.1-70B-Instruct', dtype=torch.bfloat16, "
        "max_seq_len=10240, "
        "tensor_parallel_size=8, quantization=fp8, enforce_eager=False, compilation_config={'level': None, "
        "'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, "
        "'max_cudagraph_capture_size': 512, 'use_inductor_graph_partition': False}",
    ),
    ("rocm.py:253", "Using Aiter Flash Attention backend."),
    ("gpu_model_runner.py:2877", "Model loading took 67.8 GiB and 41.2 seconds"),
    ("gpu_worker.py:359", "Available KV cache memory: 95.31 GiB"),
]
_BAR = (
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): {pct:3d}%|{bar:<10}| {n}/67 "
    "[00:{s:02d}<00:{r:02d},  5.81it/s]"
)
_FINISHED = _ENGINE + "Graph capturing finished in 23 secs, took 1.53 GiB"
_REQUEST = _PREFIX + (
    "Received request cmpl-{rid:032x}-0: prompt: 'Summarise the following support ticket in two "
    "sentences: customer reports {n} failed logins', params: SamplingParams(n=1, temperature=0.7, "
    "top_p=0.95, max_tokens={mt}), prompt_token_ids: None, lora_request: None."
)
_ACCESS = 'INFO:     10.0.{a}.{b}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
_STATS = _PREFIX + (
    "Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s, "
    "Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 41.2%"
)
_WARN = _ENGINE.replace("INFO", "WARNING") + "Sequence group cmpl-{rid:032x} is preempted by PreemptionMode.RECOMPUTE"


def generate(path: Path, lines: int, seed: int = 7) -> int:
    """Write `lines` lines to `path`; returns the byte size."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        written = 0
        for src, t in _STARTUP:
            out.write(_ENGINE.format(m=0, s=1, src=src) + t + "\n")
            written += 1
        for i in range(0, 68, 4):
            pct = i * 100 // 67
            out.write(_BAR.format(pct=pct, bar="█" * (pct // 10), n=i, s=i // 6, r=(67 - i) // 6) + "\n")
            written += 1
        out.write(_FINISHED.format(m=0, s=40, src="gpu_model_runner.py:4012") + "\n")
        written += 1
        while written < lines:
            m, s = divmod(written // 50 % 3600, 60)
            roll = rng.random()
            if roll < 0.45:
                line = _ACCESS.format(a=rng.randrange(256), b=rng.randrange(256), port=rng.randrange(30000, 60000))
            elif roll < 0.85:
                line = _REQUEST.format(
                    m=m,
                    s=s,
                    src="logger.py:43",
                    rid=rng.getrandbits(128),
                    n=rng.randrange(100),
                    mt=rng.randrange(16, 1024),
                )
            elif roll < 0.99:
                line = _STATS.format(
                    m=m,
                    s=s,
                    src="loggers.py:123",
                    p=rng.random() * 5000,
                    g=rng.random() * 900,
                    r=rng.randrange(64),
                    kv=rng.random() * 90,
                )
            else:
                line = _WARN.format(m=m, s=s, src="scheduler.py:1543", rid=rng.getrandbits(128))
            out.write(line + "\n")
            written += 1
    return path.stat().st_size


# The parse anchors of the sidecar (docs: shared notes §6), as one ERE for the grep baseline.
GREP_PATTERN = "|".join(
    [
        r"Graph capturing finished in [0-9]+ secs, took [0-9.]+ GiB",
        r"Capturing CUDA graphs \(",
        r"CUDAGraphMode\.[A-Z_]+ is not supported",
        r"Cudagraph is disabled under eager mode",
        r"Enforce eager set",
        r"Skipping (encoder and decoder )?CUDA graph capture",
        r"cudagraph_mode",
        r"EngineCore failed to start",
        r"Engine core initialization failed",
        r"out of memory",
        r"non-default args",
    ]
)
