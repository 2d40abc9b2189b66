"""Settings of a qualification, in one place. Every field is a flag of `vllm-rocm qualify run`.

The defaults are an operator's on a node where `vllm` is on PATH; this repository's CPU build is `make qualify`
(the Makefile passes its venv, model and work directory)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vllm_rocm_core.qualification import QualificationError, gpu_product_name
from vllm_rocm_known_issues.evaluator import MODES

from .ranking import DEFAULT_TIE_MARGIN, TIE_ORDER

# Least to most graph surface (ranking.py says why): the reference first, then each mode in the order a failure is
# least surprising. The same order breaks throughput ties.
DEFAULT_MODES = TIE_ORDER
assert set(DEFAULT_MODES) == set(MODES)

# vLLM's own CLI on PATH. In a container pass --command, e.g.
# `docker run ... IMAGE {model} --port 8000 {mode_args}` with `-p {port}:8000`.
DEFAULT_COMMAND = (
    "vllm serve {model} --served-model-name {served_model_name} --host 127.0.0.1 --port {port} --seed 0 {mode_args}"
)
# Relative to where it is run, as an operator expects of a command that writes a report.
DEFAULT_WORKDIR = Path("vllm-rocm-qualify")


# --quick: a smoke run in minutes on the local CPU build (14 comparison requests, 16 tokens, 1 and 4 clients).
QUICK = {
    "single_lengths": [4, 16, 64],
    "gen_tokens": 16,
    "decode_bursts": [4],
    "mixed_long": 1,
    "mixed_short": 4,
    "long_len": 256,
    "idle_seconds": 1.0,
    "concurrency": [1, 4],
    "tp_tokens": 16,
    "tp_prompt_len": 32,
    "tp_rounds": 1,
    "rounds": 2,
}


def _ints(*values: int) -> list[int]:
    return list(values)


@dataclass
class QualifyConfig:
    modes: list[str] = field(
        default_factory=lambda: list(DEFAULT_MODES),
        metadata={"help": "cudagraph modes to qualify, comma-separated", "list": str, "upper": True},
    )
    reference: str = field(
        default="NONE",
        metadata={
            "help": "the reference run whose answers are right by definition: NONE (cudagraph_mode=NONE, same "
            "compilation as the other modes; its row is the NONE row) or eager (--enforce-eager, one extra "
            "server)",
            "choices": ("NONE", "eager"),
        },
    )
    model: str = field(default="", metadata={"help": "model path or id, substituted for {model} (required)"})
    served_model_name: str = field(
        default="",
        metadata={
            "help": "the name the server answers to (also the canary baseline's model); empty: the --model value"
        },
    )
    gpu_product: str = field(
        default="",
        metadata={
            "help": "the GPU product qualified, as the node label amd.com/gpu.product-name names it (e.g. "
            "AMD_Instinct_MI300X_OAM): recorded in the report as gpu_product, which the sidecar "
            "(--gpu-product) and `vllm-rocm qualification publish` then require to match the deployment's; "
            "empty: the report names no product"
        },
    )
    command: str = field(
        default=DEFAULT_COMMAND,
        metadata={
            "help": "server command template, split like a shell line. Placeholders: {mode_args} (one word that "
            'becomes `--compilation-config {"cudagraph_mode": MODE}`, or `--enforce-eager` for the eager '
            "reference), {mode}, {port}, {model}, {served_model_name}, {gpu} (the GPU a server is placed on: see "
            "--gpus); other braces are left alone"
        },
    )
    server_args: str = field(
        default="",
        metadata={
            "help": 'extra server arguments appended to every command, e.g. "--max-model-len 2048 --max-num-seqs 128"'
        },
    )
    env: list[str] = field(
        default_factory=list,
        metadata={
            "help": "KEY=VALUE for the servers' environment (repeatable); HF_HUB_OFFLINE=1 unless set here",
            "repeat": True,
        },
    )
    host: str = field(default="127.0.0.1", metadata={"help": "where the servers answer"})
    port: int = field(default=0, metadata={"help": "port for every server (0: a free port each)"})
    workdir: Path = field(
        default=DEFAULT_WORKDIR, metadata={"help": "server logs, compile cache, reference answers and baseline"}
    )
    out: Path | None = field(default=None, metadata={"help": "report JSON (default: WORKDIR/report.json)"})
    resume: bool = field(
        default=False,
        metadata={"help": "keep the modes an earlier run of the same report finished, and their reference"},
    )
    startup_timeout: float = field(default=1800.0, metadata={"help": "seconds a server may take to become ready"})
    request_timeout: float = field(default=600.0, metadata={"help": "seconds one request may take"})
    gen_tokens: int = field(default=32, metadata={"help": "greedy tokens per comparison request"})
    top_logprobs: int = field(default=5, metadata={"help": "alternatives kept per token to judge divergences"})
    single_lengths: list[int] = field(
        default_factory=list,
        metadata={
            "help": "prompt lengths (tokens) sent alone, one after another (default: vLLM's default capture sizes "
            "up to --max-capture-size, one request per bucket)",
            "list": int,
        },
    )
    max_capture_size: int = field(
        default=512, metadata={"help": "largest capture size the default --single-lengths cover (vLLM's default cap)"}
    )
    decode_bursts: list[int] = field(
        default_factory=lambda: _ints(8, 48, 128),
        metadata={"help": "sizes of bursts of concurrent short decodes", "list": int},
    )
    mixed_long: int = field(default=4, metadata={"help": "long prompts in flight in the mixed prefill+decode shape"})
    mixed_short: int = field(default=32, metadata={"help": "short decodes in the mixed prefill+decode shape"})
    long_len: int = field(default=1024, metadata={"help": "tokens of each long prompt"})
    idle_seconds: float = field(default=10.0, metadata={"help": "idle pause before the after-idle request"})
    tolerance: float = field(
        default=0.3,
        metadata={
            "help": "nats: a greedy divergence where both runs rank the two tokens within this of each other is a "
            "tie (bf16 batch noise), and the logprobs of agreeing tokens may differ this much; the canary's "
            "fingerprint tolerance"
        },
    )
    concurrency: list[int] = field(
        default_factory=lambda: _ints(1, 16, 128),
        metadata={"help": "client counts of the throughput phase", "list": int},
    )
    tp_prompt_len: int = field(default=128, metadata={"help": "prompt tokens of each throughput request"})
    tp_tokens: int = field(default=128, metadata={"help": "output tokens of each throughput request (ignore_eos)"})
    tp_rounds: int = field(
        default=2, metadata={"help": "throughput requests per client and level in each round (at least 4)"}
    )
    rank_by: int = field(
        default=0, metadata={"help": "client count whose tok/s ranks the modes (0: geometric mean over all counts)"}
    )
    rounds: int = field(
        default=3,
        metadata={
            "help": "throughput rounds: each measures every mode once, one mode at a time (interleaved across the "
            "modes whose servers run side by side); a mode's speed is the spread of its rounds"
        },
    )
    tie_margin: float = field(
        default=DEFAULT_TIE_MARGIN,
        metadata={
            "help": "a mode is recommended over another only when its slowest round beats the other's fastest by "
            "more than this fraction; otherwise they tie and the least graph surface wins "
            f"({' < '.join(TIE_ORDER)})"
        },
    )
    canary_problems: int = field(default=8, metadata={"help": "canary problems (also the baseline's)"})
    parallel: int = field(
        default=0,
        metadata={
            "help": "servers started side by side (0: every mode at once; 1: one after another, each stopped before "
            "the next starts). Side by side, the answers are compared concurrently and throughput is measured "
            "one mode at a time while the others idle"
        },
    )
    gpus: list[str] = field(
        default_factory=list,
        metadata={
            "help": "GPUs to spread the servers over, as the servers' runtime names them (indexes or UUIDs); "
            "each server gets one (CUDA_/HIP_VISIBLE_DEVICES, or {gpu} in --command). Default: the "
            "HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES list qualify runs with, else the "
            "GPUs nvidia-smi or rocm-smi lists; one GPU (or none found): every server on it",
            "list": str,
        },
    )
    kv_cache_bytes: int = field(
        default=0,
        metadata={
            "help": "--kv-cache-memory-bytes of each server (0: when servers share a GPU, its free memory divided "
            "among them, less the model's weights and a margin, as nvidia-smi or rocm-smi reports it)"
        },
    )
    quick: bool = field(
        default=False,
        metadata={
            "help": "small shapes and short throughput phases, for a smoke run on the CPU build: sets, where the "
            "flag keeps its default, "
            + ", ".join(
                f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in QUICK.items()
            )
        },
    )
    require: list[str] = field(
        default_factory=list,
        metadata={"help": "exit 1 unless this mode passed: the mode you mean to deploy (repeatable)", "repeat": True},
    )

    @property
    def report_path(self) -> Path:
        return self.out or self.workdir / "report.json"

    def lengths(self, max_model_len: int) -> list[int]:
        """--single-lengths, or vLLM's (0.14+) default capture sizes: [1, 2, 4] + 8..248 by 8 + 256.. by 16."""
        limit = max_model_len - self.gen_tokens
        if self.single_lengths:
            return [n for n in self.single_lengths if 0 < n <= limit]
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, self.max_capture_size + 1, 16))
        return [n for n in sizes if n <= min(limit, self.max_capture_size)]

    def validate(self) -> None:
        if self.quick:  # what --quick sets, unless given as well
            defaults = QualifyConfig()
            for k, v in QUICK.items():
                if getattr(self, k) == getattr(defaults, k):
                    setattr(self, k, v)
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"--modes: {', '.join(bad) or 'empty'}: choose from {', '.join(MODES)}")
        if len(set(self.modes)) != len(self.modes):
            raise ValueError("--modes names a mode twice")
        bad = [m for m in self.require if m not in MODES]
        if bad:
            raise ValueError(f"--require {', '.join(bad)}: not a cudagraph mode")
        missing = [m for m in self.require if m not in self.modes]
        if missing:
            raise ValueError(f"--require {', '.join(missing)}: not among --modes")
        for name in (
            "gen_tokens",
            "top_logprobs",
            "tp_tokens",
            "tp_prompt_len",
            "tp_rounds",
            "canary_problems",
            "rounds",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError("--concurrency needs client counts of at least 1")
        if self.rank_by and self.rank_by not in self.concurrency:
            raise ValueError(f"--rank-by {self.rank_by} is not one of --concurrency")
        if self.tolerance <= 0:
            raise ValueError("--tolerance must be positive")
        if not 0 <= self.tie_margin < 1:
            raise ValueError("--tie-margin is a fraction: at least 0, below 1")
        for name in ("parallel", "kv_cache_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must not be negative")
        if len(set(self.gpus)) != len(self.gpus) or not all(self.gpus):
            raise ValueError("--gpus names a GPU twice, or an empty one")
        for e in self.env:
            if "=" not in e:
                raise ValueError(f"--env {e!r}: expected KEY=VALUE")
        if self.gpu_product:
            try:
                gpu_product_name(self.gpu_product)
            except QualificationError as e:
                raise ValueError(str(e)) from e
