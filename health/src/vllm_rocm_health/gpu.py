"""Which AMD GPU architecture this node has, observed rather than told.

vLLM logs no GPU architecture on ROCm (0.10 to 0.34 platforms/rocm.py reads `gcnArchName` and keeps it), so the
sidecar reads the kernel's KFD topology: one directory per HSA node under /sys/class/kfd/kfd/topology/nodes, whose
`properties` file carries `gfx_target_version MMmmss` (90402 = gfx942, 90010 = gfx90a, 90500 = gfx950; CPU nodes
say 0). Containers see the host's sysfs read-only, so no device, capability or API permission is needed. A node with
GPUs of several architectures is ambiguous: nothing is inferred from it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
_TARGET = re.compile(r"^gfx_target_version (\d{1,9})$", re.M)
_MAX_PROPERTIES = 1 << 16  # a properties file is ~1 KB


@dataclass(frozen=True)
class Observation:
    arch: str | None  # the one gfx name of this node's GPUs, or None
    detail: str  # what was seen, for logs and /readyz messages


def gfx_name(target_version: int) -> str | None:
    """`gfx_target_version` -> gfx name: major * 10000 + minor * 100 + stepping, the stepping in hex (gfx90a)."""
    if target_version <= 0:
        return None
    major, minor, step = target_version // 10000, (target_version // 100) % 100, target_version % 100
    if not 7 <= major <= 99 or minor > 15 or step > 15:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def observe(root: str | Path = KFD_NODES) -> Observation:
    """The architecture of the GPUs the KFD topology lists. Never raises: what cannot be read is said."""
    nodes = Path(root)
    try:
        entries = sorted(p for p in nodes.iterdir() if p.name.isdigit())
    except OSError as e:
        return Observation(None, f"no KFD topology at {nodes} ({e.strerror or e})")
    archs: dict[str, int] = {}
    for node in entries:
        try:
            with (node / "properties").open(encoding="ascii", errors="replace") as f:
                text = f.read(_MAX_PROPERTIES)
        except OSError:
            continue
        m = _TARGET.search(text)
        name = gfx_name(int(m.group(1))) if m else None
        if name:
            archs[name] = archs.get(name, 0) + 1
    if not archs:
        return Observation(None, f"no GPU node in the KFD topology at {nodes}")
    seen = ", ".join(f"{n} x{c}" for n, c in sorted(archs.items()))
    if len(archs) > 1:
        return Observation(None, f"GPUs of several architectures at {nodes} ({seen})")
    return Observation(next(iter(archs)), f"{seen} at {nodes}")
