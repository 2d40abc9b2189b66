"""The project's own code stays lint-clean: ruff on the Python, mypy on the three source roots, shellcheck on the
tool scripts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_ruff() -> None:
    res = subprocess.run([str(BIN / "ruff"), "check", "--output-format", "concise", "patches/src", "health/src",
                          "tools", "tests"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy() -> None:
    # What and how strictly: pyproject.toml's [tool.mypy] (patches/src, health/src, tools/src as Python 3.10).
    res = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_shellcheck_tool_scripts() -> None:
    scripts = sorted(str(p.relative_to(REPO)) for p in (REPO / "tools").glob("*.sh")) + [".ci/run"]
    res = subprocess.run([str(BIN / "shellcheck"), "-x", *scripts], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
