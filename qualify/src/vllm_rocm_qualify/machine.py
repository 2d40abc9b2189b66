"""What the report says about the machine it was measured on (best effort: tools that are absent are skipped)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path


def _run(argv: list[str]) -> str:
    if not shutil.which(argv[0]):
        return ""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    """The CPU's model name (for reports: the bench and qualify print what they ran on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def describe() -> dict[str, object]:
    gpus = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    if not gpus:
        gpus = _run(["rocm-smi", "--showproductname", "--csv"])
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "gpus": [g.strip() for g in gpus.splitlines() if g.strip()],
    }
