"""The wheel users get (and the sidecar image installs) is the product: no developer tooling in it, and its
commands are the ones the READMEs name."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_carries_the_product_and_no_developer_tooling(tmp_path: Path) -> None:
    # Built from a copy of what the sidecar image's build stage copies: setuptools writes build/ into its source.
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(REPO / "pyproject.toml", src)
    for room in ("patches", "known-issues", "core", "qualify", "health"):
        shutil.copytree(REPO / room / "src", src / room / "src", ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    (wheel,) = tmp_path.glob("vllm_rocm_dist-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        packages = {n.split("/")[0] for n in names if n.endswith(".py")}
        (ep_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = configparser.ConfigParser()
        entry_points.read_string(zf.read(ep_name).decode())
    assert packages == {
        "vllm_rocm_known_issues",
        "vllm_rocm_patches",
        "vllm_rocm_core",
        "vllm_rocm_qualify",
        "vllm_rocm_health",
    }
    assert dict(entry_points["console_scripts"]) == {
        "vllm-rocm": "vllm_rocm_qualify.command:main",
        "vllm-rocm-health": "vllm_rocm_health.cli:main",
        "vllm-rocm-patches": "vllm_rocm_patches.cli:deprecated_main",
    }
