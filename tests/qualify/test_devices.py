"""Where side-by-side servers run and how much memory each may take (devices.py): the GPU inventory from the
operator, the visible-devices variables or the SMI tools, and the per-server KV cache budget. No GPU here: the tools'
output is given as text in the formats they print."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_rocm_qualify import devices
from vllm_rocm_qualify.devices import GiB, Gpu, Inventory, inventory, parse_nvidia_smi, parse_rocm_smi, place

MODES = ["NONE", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "FULL"]
# nvidia-smi --query-gpu=index,uuid,memory.free,memory.total --format=csv,noheader,nounits (MiB)
NVIDIA = "0, GPU-0a1b, 142500, 143771\n1, GPU-2c3d, 143000, 143771\n"
# rocm-smi --showmeminfo vram --json, with the warning some releases print first
ROCM = (
    "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n"
    '{"card0": {"VRAM Total Memory (B)": "206141652992", "VRAM Total Used Memory (B)": "283115520"}, '
    '"card1": {"VRAM Total Memory (B)": "206141652992", "VRAM Total Used Memory (B)": "283115520"}, '
    '"system": {"Driver version": "6.10.5"}}'
)


def h200(free_gib: float = 139.0) -> Inventory:
    return Inventory(
        [Gpu("GPU-0a1b", "0", "GPU-0a1b", int(free_gib * GiB), int(140.4 * GiB))], "nvidia-smi", "cuda", ""
    )


def test_the_tools_output_parses() -> None:
    gpus = parse_nvidia_smi(NVIDIA)
    assert [(g.id, g.index, g.free, g.total) for g in gpus] == [
        ("GPU-0a1b", "0", 142500 << 20, 143771 << 20),
        ("GPU-2c3d", "1", 143000 << 20, 143771 << 20),
    ]
    amd = parse_rocm_smi(ROCM)
    free = 206141652992 - 283115520
    assert [(g.id, g.free, g.total) for g in amd] == [("0", free, 206141652992), ("1", free, 206141652992)]
    for junk in ("", "No devices", "0, x, y, z", "{not json", '{"card0": {"VRAM Total Memory (B)": "x"}}'):
        assert parse_nvidia_smi(junk) == [] and parse_rocm_smi(junk) == []


def test_inventory_prefers_the_operator_then_the_visible_list_then_the_tool() -> None:
    found = (parse_nvidia_smi(NVIDIA), "nvidia-smi", "cuda")
    assert [g.id for g in inventory([], {}, found).gpus] == ["GPU-0a1b", "GPU-2c3d"]
    given = inventory(["1"], {"CUDA_VISIBLE_DEVICES": "0,1"}, found)
    assert given.source == "--gpus" and given.gpus[0].free == 143000 << 20  # matched by index
    listed = inventory([], {"CUDA_VISIBLE_DEVICES": "GPU-2c3d"}, found)
    assert listed.variable == "CUDA_VISIBLE_DEVICES" and listed.gpus[0].index == "1"  # matched by UUID
    unknown = inventory([], {"HIP_VISIBLE_DEVICES": "3"}, ([], "", ""))
    assert unknown.gpus == [Gpu("3")] and unknown.variable == "HIP_VISIBLE_DEVICES"
    assert inventory([], {}, ([], "", "")).gpus == []


def test_five_servers_on_one_h200_share_its_free_memory(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    with open(model / "model.safetensors", "wb") as f:
        f.truncate(2 * GiB)  # sparse: its size counts, not its blocks
    (model / "config.json").write_text("{}")
    placed = place(MODES, h200(), {}, 0, str(model), [])
    share = 139.0 * GiB * devices.USABLE / 5
    for p in placed.values():
        assert p.env == {}  # one GPU: nothing to pin
        kv = int(p.args[p.args.index("--kv-cache-memory-bytes") + 1])
        assert kv == int(share - 2 * GiB - devices.OVERHEAD - devices.OVERHEAD_PER_WEIGHT * 2 * GiB)
        util = float(p.args[p.args.index("--gpu-memory-utilization") + 1])
        # vLLM's start-up check (free >= util x total) holds whatever the other four took of their shares
        assert util * 140.4 * GiB <= 139.0 * GiB - 4 * share
        assert "GPU GPU-0a1b with 4 other server(s)" in p.note and "2.0 GiB weights" in p.note


def test_one_server_per_gpu_is_pinned_and_sizes_itself() -> None:
    found = (parse_nvidia_smi(NVIDIA), "nvidia-smi", "cuda")
    inv = inventory([], {}, found)
    placed = place(MODES[:2], inv, {}, 0, "org/model", [])
    assert placed["NONE"].env == {"CUDA_VISIBLE_DEVICES": "GPU-0a1b"}
    assert placed["PIECEWISE"].env == {"CUDA_VISIBLE_DEVICES": "GPU-2c3d"}
    assert all(p.args == [] and "alone" in p.note for p in placed.values())
    # Five modes on two GPUs: round robin, three and two servers sharing, each sized.
    five = place(MODES, inv, {}, 0, "org/model", [])
    assert [five[m].gpu.id for m in MODES if five[m].gpu] == ["GPU-0a1b", "GPU-2c3d"] * 2 + ["GPU-0a1b"]
    assert "with 2 other" in five["NONE"].note and "with 1 other" in five["PIECEWISE"].note
    assert "weights not known here" in five["NONE"].note  # a hub id: no local weight files to count


def test_rocm_pins_with_hip_and_keeps_a_set_cuda_variable_equal() -> None:
    inv = inventory([], {}, (parse_rocm_smi(ROCM), "rocm-smi", "rocm"))
    assert place(MODES[:2], inv, {}, 0, "m", [])["PIECEWISE"].env == {"HIP_VISIBLE_DEVICES": "1"}
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}  # vLLM on ROCm refuses HIP_ and CUDA_VISIBLE_DEVICES that differ
    inv = inventory([], env, (parse_rocm_smi(ROCM), "rocm-smi", "rocm"))
    assert place(MODES[:2], inv, env, 0, "m", [])["PIECEWISE"].env == {
        "CUDA_VISIBLE_DEVICES": "1",
        "HIP_VISIBLE_DEVICES": "1",
    }
    env = {"ROCR_VISIBLE_DEVICES": "2,3"}  # HIP's indexes count inside ROCR's list: pin through ROCR alone
    inv = inventory([], env, ([], "", ""))
    assert place(MODES[:2], inv, env, 3 * GiB, "m", [])["PIECEWISE"].env == {"ROCR_VISIBLE_DEVICES": "3"}


def test_the_operators_kv_cache_bytes_wins() -> None:
    placed = place(MODES, h200(), {}, 3_000_000_000, "m", [])
    assert placed["FULL"].args[:2] == ["--kv-cache-memory-bytes", "3000000000"]
    assert "--gpu-memory-utilization" in placed["FULL"].args and "(--kv-cache-bytes)" in placed["FULL"].note
    cpu = place(MODES, Inventory([], "", "", ""), {}, 1 << 30, "m", [])
    assert cpu["NONE"].args == ["--kv-cache-memory-bytes", str(1 << 30)] and cpu["NONE"].gpu is None


def test_no_gpu_found_adds_nothing() -> None:
    placed = place(MODES, Inventory([], "", "", ""), {}, 0, "m", [])
    assert all(p.args == [] and p.env == {} and "no GPU found" in p.note for p in placed.values())


@pytest.mark.parametrize(
    "inv,kv,args,error",
    [
        (h200(), 0, ["--gpu-memory-utilization", "0.15"], "memory profiling sees the other servers"),
        (Inventory([Gpu("0")], "--gpus", "", ""), 0, [], "free memory is not known"),
        (h200(free_gib=8.0), 0, [], "too little for 5 servers side by side"),
    ],
)
def test_sharing_a_gpu_unsafely_is_refused_before_any_server_starts(
    inv: Inventory, kv: int, args: list[str], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        place(MODES, inv, {}, kv, "m", args)


def test_the_operators_own_memory_flags_are_left_alone() -> None:
    placed = place(MODES, h200(), {}, 0, "m", ["--kv-cache-memory-bytes", "2000000000"])
    assert all(p.args == [] and "as --server-args/--command say" in p.note for p in placed.values())
    alone = place(["NONE"], h200(), {}, 0, "m", ["--gpu-memory-utilization", "0.5"])  # one server: fine
    assert alone["NONE"].args == []
