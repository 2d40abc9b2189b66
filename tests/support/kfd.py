"""A KFD topology tree in the format the amdgpu kernel driver writes under /sys/class/kfd/kfd/topology/nodes (one
directory per HSA node, `properties` as `name value` lines; node 0 is the CPU with gfx_target_version 0), for the
sidecar's `--kfd-topology`. The keys and values follow a real MI300X node, trimmed."""

from __future__ import annotations

from pathlib import Path

_CPU = "cpu_cores_count 96\nsimd_count 0\nmem_banks_count 1\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\n"
_GPU = (
    "cpu_cores_count 0\nsimd_count 1216\nmem_banks_count 1\ncaches_count 469\nio_links_count 1\n"
    "max_waves_per_simd 8\nlds_size_in_kb 64\nwave_front_size 64\narray_count 32\nsimd_arrays_per_engine 1\n"
    "cu_per_simd_array 10\nsimd_per_cu 4\ngfx_target_version {target}\nvendor_id 4098\ndevice_id 29857\n"
    "location_id {location}\ndomain 0\ndrm_render_minor {minor}\nnum_sdma_engines 2\nnum_xcc 8\n"
)
TARGETS = {"gfx90a": 90010, "gfx942": 90402, "gfx950": 90500, "gfx1100": 110000}


def write_topology(root: Path, *archs: str) -> Path:
    """`root`/nodes with a CPU node and one GPU node per arch; returns the nodes directory."""
    nodes = root / "nodes"
    (nodes / "0").mkdir(parents=True, exist_ok=True)
    (nodes / "0" / "properties").write_text(_CPU)
    for i, arch in enumerate(archs, start=1):
        (nodes / str(i)).mkdir(exist_ok=True)
        (nodes / str(i) / "properties").write_text(
            _GPU.format(target=TARGETS[arch], location=768 + 256 * i, minor=127 + i)
        )
    return nodes
