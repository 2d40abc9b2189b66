"""Where the tests find the repository's parts, and the pinned tools of the project venv (shared by every test
directory)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent  # the project venv: hadolint, shellcheck, ruff live next to python
DOCKERFILES = [p for p in sorted(DOCKER.glob("**/Dockerfile*"), key=str) if not p.name.endswith(".dockerignore")]
VLLM_DOCKERFILES = [p for p in DOCKERFILES if p.parent.name == "vllm-rocm"]


def tool(name: str) -> str:
    """A pinned tool from the venv (or PATH as a fallback); skip-free: a missing tool is a failed test."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert found, f"{name} is not installed (make setup installs it into .work/venv)"
    return str(found)
