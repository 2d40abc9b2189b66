"""Where the tests find the repository's parts, and the pinned tools of the project venv (shared by every test
directory)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent  # the project venv: hadolint, shellcheck, ruff live next to python
DOCKERFILES = [p for p in sorted(DOCKER.glob("**/Dockerfile*"), key=str) if not p.name.endswith(".dockerignore")]
VLLM_DOCKERFILES = [p for p in DOCKERFILES if p.parent.name == "vllm-rocm"]
# What is not the repository's own text: git's store, the work directory (venvs, caches, the image and cluster stores,
# ~17 GB after a run) and tools' caches.
NOT_SOURCE = frozenset({".git", ".work", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def markdown_files() -> list[Path]:
    """The repository's Markdown files, sorted. The walk never enters NOT_SOURCE: a glob of the whole tree walked .work
    too, for seconds, while the other test sessions changed it (a layer directory of the image store removed between
    listing and reading failed a unit test: FileNotFoundError, fresh-clone run 44)."""
    found = []
    for top, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in NOT_SOURCE]
        found += [Path(top, f) for f in files if f.endswith(".md")]
    return sorted(found)


def tool(name: str) -> str:
    """A pinned tool from the venv (or PATH as a fallback); skip-free: a missing tool is a failed test."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert found, f"{name} is not installed (make setup installs it into .work/venv)"
    return str(found)
