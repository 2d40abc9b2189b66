"""The project's own code stays lint-clean: ruff on the Python, mypy on the three source roots, shellcheck on the
tool scripts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.imports import absolute_imports

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_ruff() -> None:
    roots = ["patches/src", "known-issues/src", "core/src", "qualify/src", "health/src", "tools", "tests"]
    res = subprocess.run(
        [str(BIN / "ruff"), "check", "--output-format", "concise", *roots], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format() -> None:
    # The code's layout is ruff format's (applied once to the whole tree): a diff here means `ruff format .`.
    res = subprocess.run([str(BIN / "ruff"), "format", "--check", "."], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy() -> None:
    # What and how strictly: pyproject.toml's [tool.mypy] (every source root, as Python 3.10).
    res = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_shellcheck_tool_scripts() -> None:
    scripts = sorted(str(p.relative_to(REPO)) for p in (REPO / "tools").rglob("*.sh")) + [".ci/run"]
    res = subprocess.run([str(BIN / "shellcheck"), "-x", *scripts], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# What each product package may import of the others (docs/architecture.md), lowest first. Developer tooling
# (vllm_rocm_stack) may import any of them; none of them may import it, or it would have to ship in the wheel and the
# images.
MAY_IMPORT = {
    "vllm_rocm_known_issues": set(),
    "vllm_rocm_patches": {"vllm_rocm_known_issues"},
    "vllm_rocm_core": {"vllm_rocm_known_issues"},
    "vllm_rocm_health": {"vllm_rocm_known_issues", "vllm_rocm_core"},
    "vllm_rocm_qualify": {"vllm_rocm_health", "vllm_rocm_core", "vllm_rocm_patches", "vllm_rocm_known_issues"},
}
ROOTS = {
    "vllm_rocm_known_issues": "known-issues",
    "vllm_rocm_patches": "patches",
    "vllm_rocm_core": "core",
    "vllm_rocm_health": "health",
    "vllm_rocm_qualify": "qualify",
}
# Stdlib only (no third-party import): the patch tool and the evaluator run in bare base images at build time
# (tests/patches/test_patches_cli.py runs them there); the report format is read by every part.
STDLIB_ONLY = ("vllm_rocm_known_issues", "vllm_rocm_patches", "vllm_rocm_core")


def test_imports_point_one_way() -> None:
    # The table itself: no package may import one that imports it, directly or through others.
    assert set(ROOTS) == set(MAY_IMPORT)
    for package in MAY_IMPORT:
        reach, todo = set(), list(MAY_IMPORT[package])
        while todo:
            other = todo.pop()
            if other not in reach:
                reach.add(other)
                todo += MAY_IMPORT[other]
        assert package not in reach, f"{package} can reach itself through {sorted(reach)}"
    # The code keeps to the table.
    first_party = set(MAY_IMPORT) | {"vllm_rocm_stack"}
    wrong = []
    for package, room in ROOTS.items():
        for path in sorted((REPO / room / "src" / package).rglob("*.py")):
            for name in absolute_imports(path):
                top = name.split(".")[0]
                if top in first_party and top != package and top not in MAY_IMPORT[package]:
                    wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_stdlib_only_packages() -> None:
    wrong = []
    for package in STDLIB_ONLY:
        allowed = set(sys.stdlib_module_names) | MAY_IMPORT[package] | {package, "__future__"}
        for path in sorted((REPO / ROOTS[package] / "src" / package).rglob("*.py")):
            wrong += [
                f"{path.relative_to(REPO)} imports {n}"
                for n in absolute_imports(path)
                if n.split(".")[0] not in allowed
            ]
    assert not wrong, "\n".join(wrong)


def test_one_minimum_python() -> None:
    """[project].requires-python is the statement; ruff reads it, and mypy and the tooling package must agree."""
    import tomllib

    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    tools = tomllib.loads((REPO / "tools" / "pyproject.toml").read_text())
    minimum = re.fullmatch(r">=(3\.\d+)", root["project"]["requires-python"])
    assert minimum, root["project"]["requires-python"]
    assert root["tool"]["mypy"]["python_version"] == minimum.group(1)
    assert "target-version" not in root["tool"]["ruff"]
    assert tools["project"]["requires-python"] == root["project"]["requires-python"]
