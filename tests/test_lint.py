"""The project's own code stays lint-clean: ruff on the Python, mypy on the three source roots, shellcheck on the
tool scripts."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_ruff() -> None:
    roots = ["patches/src", "known-issues/src", "qualify/src", "health/src", "tools", "tests"]
    res = subprocess.run([str(BIN / "ruff"), "check", "--output-format", "concise", *roots], cwd=REPO,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy() -> None:
    # What and how strictly: pyproject.toml's [tool.mypy] (every source root, as Python 3.10).
    res = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_shellcheck_tool_scripts() -> None:
    scripts = sorted(str(p.relative_to(REPO)) for p in (REPO / "tools").rglob("*.sh")) + [".ci/run"]
    res = subprocess.run([str(BIN / "shellcheck"), "-x", *scripts], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# What each product package may import of the others (docs/architecture.md). Developer tooling (vllm_rocm_stack)
# may import any of them; none of them may import it, or it would have to ship in the wheel and the images.
MAY_IMPORT = {
    "vllm_rocm_known_issues": set(),
    "vllm_rocm_patches": {"vllm_rocm_known_issues"},
    "vllm_rocm_health": {"vllm_rocm_known_issues", "vllm_rocm_qualify"},
    "vllm_rocm_qualify": {"vllm_rocm_health", "vllm_rocm_patches", "vllm_rocm_known_issues"},
}
ROOTS = {"vllm_rocm_known_issues": "known-issues", "vllm_rocm_patches": "patches", "vllm_rocm_health": "health",
         "vllm_rocm_qualify": "qualify"}


def test_imports_point_one_way() -> None:
    import ast

    first_party = set(MAY_IMPORT) | {"vllm_rocm_stack"}
    wrong = []
    for package, room in ROOTS.items():
        for path in sorted((REPO / room / "src" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in first_party and top != package and top not in MAY_IMPORT[package]:
                        wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert not wrong, "\n".join(wrong)
    # The sidecar reads only the report format of qualify, not the runner and its servers.
    health = REPO / "health" / "src"
    used = {m for p in health.rglob("*.py") for m in re.findall(r"vllm_rocm_qualify(?:\.\w+)?", p.read_text())}
    assert used <= {"vllm_rocm_qualify", "vllm_rocm_qualify.qualification", "vllm_rocm_qualify.qualification_cli"}
