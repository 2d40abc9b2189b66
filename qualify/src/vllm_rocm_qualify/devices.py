"""Where each server runs when several start side by side: which GPU, and how much memory it may take.

vLLM sizes its KV cache by profiling: it measures the GPU's free memory, runs a forward pass and takes
`--gpu-memory-utilization` of the total less what it saw in use. Servers that start together on one GPU see each
other's memory come and go while they profile: on an H200, three of five servers started with
`--gpu-memory-utilization 0.15` died ("No available memory for the cache blocks"). `--kv-cache-memory-bytes` skips
the profiling (vLLM 0.22.1, 0.24.0, 0.26.0: `gpu_worker.determine_available_memory`); five servers with 3 GB each
were all ready in 106 s. Its start-up check still wants `--gpu-memory-utilization` of the total free at
`init_device` (`v1/worker/utils.request_memory`, default 0.92), which a server that starts after the others
allocated would fail: so each server also gets its share as `--gpu-memory-utilization`.

The budget: the GPU's free memory before any server starts (nvidia-smi or rocm-smi), 90% of it divided among the
servers on that GPU; a server's KV cache is its share less the model's weights (the size of its weight files, when
the model is a local directory) and a fixed overhead (CUDA context, activations, graphs, 2 GiB plus a quarter of
the weights). `--kv-cache-bytes` sets the KV cache instead. A GPU with one server gets no memory flags: vLLM
profiles alone, as it does in production.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

GiB = 1 << 30
USABLE = 0.9  # of a GPU's free memory: the rest for what no estimate sees (fragmentation, other processes)
OVERHEAD = 2 * GiB  # per server besides weights and KV cache: CUDA context, activation peak, graphs
OVERHEAD_PER_WEIGHT = 0.25
MIN_KV = GiB // 2
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
VISIBLE = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")  # first set one wins


@dataclass(frozen=True)
class Gpu:
    id: str  # as the servers' runtime names it: an index or a UUID
    index: str = ""  # the tool's index, to match a given id against
    uuid: str = ""
    free: int | None = None  # bytes, before any server starts
    total: int | None = None


@dataclass(frozen=True)
class Inventory:
    gpus: list[Gpu]
    source: str  # where the list came from, for the progress line
    platform: str  # "cuda", "rocm" or "" (not known)
    variable: str  # the variable the list came from ("" when found by a tool)


@dataclass(frozen=True)
class Placement:
    gpu: Gpu | None
    env: dict[str, str]  # what pins the server to its GPU
    args: list[str]  # memory flags for the server
    note: str  # for the progress line


def _run(argv: list[str]) -> str:
    if not shutil.which(argv[0]):
        return ""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return res.stdout if res.returncode == 0 else ""


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,uuid,memory.free,memory.total --format=csv,noheader,nounits` (MiB)."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        index, uuid, free, total = parts
        try:
            gpus.append(Gpu(id=uuid or index, index=index, uuid=uuid, free=int(free) << 20, total=int(total) << 20))
        except ValueError:
            continue
    return gpus


def parse_rocm_smi(text: str) -> list[Gpu]:
    """`rocm-smi --showmeminfo vram --json`: {"card0": {"VRAM Total Memory (B)": "...", "VRAM Total Used Memory
    (B)": "..."}, ...}, sometimes after a warning line."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else {}
    except ValueError:
        return []
    gpus = []
    for card, info in data.items() if isinstance(data, dict) else ():
        index = card.removeprefix("card")
        if not (card.startswith("card") and index.isdigit() and isinstance(info, dict)):
            continue
        try:
            total = int(info["VRAM Total Memory (B)"])
            used = int(info["VRAM Total Used Memory (B)"])
        except (KeyError, TypeError, ValueError):
            continue
        gpus.append(Gpu(id=index, index=index, free=total - used, total=total))
    return sorted(gpus, key=lambda g: int(g.index))


def detect() -> tuple[list[Gpu], str, str]:
    """The node's GPUs with their memory, the tool that listed them and the platform."""
    gpus = parse_nvidia_smi(
        _run(["nvidia-smi", "--query-gpu=index,uuid,memory.free,memory.total", "--format=csv,noheader,nounits"])
    )
    if gpus:
        return gpus, "nvidia-smi", "cuda"
    gpus = parse_rocm_smi(_run(["rocm-smi", "--showmeminfo", "vram", "--json"]))
    if gpus:
        return gpus, "rocm-smi", "rocm"
    return [], "", ""


def inventory(given: list[str], env: Mapping[str, str], found: tuple[list[Gpu], str, str]) -> Inventory:
    """The GPUs the servers are spread over: `given` (--gpus), else the visible-devices list qualify runs with,
    else every GPU the tool found. Ids are matched to the tool's by index or UUID for their memory."""
    tool_gpus, tool, platform = found

    def known(i: str) -> Gpu:
        match = next((g for g in tool_gpus if i in (g.index, g.uuid)), None)
        return Gpu(id=i, index=match.index, uuid=match.uuid, free=match.free, total=match.total) if match else Gpu(i)

    if given:
        return Inventory([known(i) for i in given], "--gpus", platform, "")
    for var in VISIBLE:
        listed = [x.strip() for x in env.get(var, "").split(",") if x.strip()]
        if listed:
            return Inventory([known(i) for i in listed], var, platform, var)
    return Inventory(tool_gpus, tool, platform, "")


def weights_bytes(model: str) -> int | None:
    """The size of a local model directory's weight files; None when it is not one here (a hub id, a path inside
    a container)."""
    path = Path(model)
    if not path.is_dir():
        return None
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def _pin(inv: Inventory, gpu: Gpu, env: Mapping[str, str]) -> dict[str, str]:
    """The variables that show a server only `gpu`: the one the list came from, the platform's, and any other of
    HIP_/CUDA_VISIBLE_DEVICES already set (vLLM on ROCm refuses the two when they differ)."""
    names = {inv.variable} if inv.variable else set()
    names |= {"cuda": {"CUDA_VISIBLE_DEVICES"}, "rocm": {"HIP_VISIBLE_DEVICES"}}.get(
        inv.platform, {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}
    )
    names |= {v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if env.get(v)}
    if inv.variable == "ROCR_VISIBLE_DEVICES":  # HIP's indexes count within ROCR's list: pin through ROCR alone
        names = {"ROCR_VISIBLE_DEVICES"}
    return {n: gpu.id for n in sorted(names)}


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def place(
    labels: list[str],
    inv: Inventory,
    env: Mapping[str, str],
    kv_cache_bytes: int,
    model: str,
    operator_args: list[str],
) -> dict[str, Placement]:
    """Each server's GPU (round robin over the inventory) and memory flags. Raises ValueError when servers would
    share a GPU and cannot be sized safely: the message says what to give instead."""
    gpus = inv.gpus
    if not gpus:
        args = ["--kv-cache-memory-bytes", str(kv_cache_bytes)] if kv_cache_bytes else []
        note = "no GPU found (nvidia-smi, rocm-smi, --gpus, *_VISIBLE_DEVICES)" + (
            f"; KV cache {_gib(kv_cache_bytes)} each (--kv-cache-bytes)" if kv_cache_bytes else ""
        )
        return {label: Placement(None, {}, args, note) for label in labels}
    own_sizing = any(a.startswith(("--kv-cache-memory-bytes", "--gpu-memory-utilization")) for a in operator_args)
    weights = weights_bytes(model)
    out: dict[str, Placement] = {}
    for i, label in enumerate(labels):
        gpu = gpus[i % len(gpus)]
        sharing = len(labels[i % len(gpus) :: len(gpus)])
        pin = _pin(inv, gpu, env) if len(gpus) > 1 else {}
        where = f"GPU {gpu.id}" + (f" with {sharing - 1} other server(s)" if sharing > 1 else " alone")
        if own_sizing:
            if sharing > 1 and not any(a.startswith("--kv-cache-memory-bytes") for a in operator_args):
                raise ValueError(
                    f"{sharing} servers would share GPU {gpu.id} sized by --gpu-memory-utilization: vLLM's memory "
                    "profiling sees the other servers and fails ('No available memory for the cache blocks'); "
                    "give --kv-cache-bytes (or --kv-cache-memory-bytes in --server-args), or --parallel 1"
                )
            out[label] = Placement(gpu, pin, [], f"{where}; memory as --server-args/--command say")
            continue
        if sharing == 1 and not kv_cache_bytes:
            out[label] = Placement(gpu, pin, [], f"{where}; vLLM sizes its own memory")
            continue
        free = gpu.free
        share = free * USABLE / sharing if free else None
        if kv_cache_bytes:
            kv, how = kv_cache_bytes, "--kv-cache-bytes"
        elif free is None or share is None:
            raise ValueError(
                f"{sharing} servers would share GPU {gpu.id}, whose free memory is not known (no nvidia-smi or "
                "rocm-smi answer for it): give --kv-cache-bytes, or --parallel 1"
            )
        else:
            w = weights or 0
            kv = int(share - w - OVERHEAD - OVERHEAD_PER_WEIGHT * w)
            how = (
                f"{_gib(free)} free x {USABLE:.0%} / {sharing} servers, less "
                + (f"{_gib(w)} weights" if weights is not None else "weights not known here (not counted)")
                + " and overhead"
            )
            if kv < MIN_KV:
                raise ValueError(
                    f"GPU {gpu.id} has {_gib(free)} free: too little for {sharing} servers side by side "
                    f"({_gib(kv)} of KV cache each); give --parallel (fewer at once) or --kv-cache-bytes"
                )
        args = ["--kv-cache-memory-bytes", str(kv)]
        if share and gpu.total:
            # vLLM's start-up check wants this fraction of the total free; its share is free whatever the others took
            args += ["--gpu-memory-utilization", f"{max(0.01, int(share / gpu.total * 1000) / 1000):.3f}"]
        out[label] = Placement(gpu, pin, args, f"{where}; KV cache {_gib(kv)} ({how})")
    return out
