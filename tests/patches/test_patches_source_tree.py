"""vLLM SOURCE trees (an sdist or a checkout: vllm/ without dist-info), as a source-build Dockerfile patches them.

The trees are the real released files with the dist-info removed: the Python sources of an sdist are the same
files the wheel ships (the wheel is built from them), and the pins are checked against exactly those bytes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.vllm_releases import AITER_FA, PATCH_TOOL_PYTHONPATH, tree_snapshot


def run(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PATCH_TOOL_PYTHONPATH}
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_patches", *args], capture_output=True, text=True, env=env, timeout=60
    )


def _checkout(tree: Path) -> Path:
    """A git checkout: no dist-info, no generated vllm/_version.py (vllm/version.py only re-exports it)."""
    for d in tree.glob("vllm-*.dist-info"):
        shutil.rmtree(d)
    (tree / "vllm/_version.py").unlink()
    return tree


@pytest.mark.parametrize("version", ["0.10.1.1", "0.10.2"])
def test_checkout_needs_release_then_applies_verifies_reverts(version: str, release_copy, tmp_path: Path) -> None:
    tree = _checkout(release_copy(version))
    pristine = tree_snapshot(tree)

    r = run("status", str(tree))
    assert r.returncode == 2
    assert "pass --release X.Y.Z" in r.stderr and f"its files match vLLM {version} pristine" in r.stderr

    r = run("status", str(tree), "--release", version)
    assert r.returncode == 0 and "(source tree)" in r.stdout and "applicable" in r.stdout, r.stdout

    report = tmp_path / "apply.json"
    r = run("apply", str(tree), "--release", version, "--report", str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(report.read_text())
    assert data["release"]["tree"] == "source" and data["release"]["sources"] == {"--release": version}
    last = [e for e in data["entries"] if AITER_FA in e["files"]][-1]  # stacked: the last patch of the file
    assert last["files"][AITER_FA]["after"] == last["files"][AITER_FA]["patched_sha256"]
    assert data["record"] == ["no dist-info RECORD found; nothing to keep consistent"]

    assert run("apply", str(tree), "--release", version).stdout.count("nothing to do") == 1
    assert run("verify", str(tree), "--release", version).returncode == 0
    assert run("revert", str(tree), "--release", version).returncode == 0
    assert tree_snapshot(tree) == pristine


def test_sdist_pkg_info_names_the_release(release_copy) -> None:
    tree = _checkout(release_copy("0.10.2"))
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.10.2\n\nlong text\n")
    r = run("apply", str(tree))
    assert r.returncode == 0 and "applied 3 patch(es)" in r.stdout, r.stdout + r.stderr
    assert run("verify", str(tree), "--release", "0.10.2").returncode == 0  # agreeing --release is fine


def test_release_that_contradicts_the_tree_is_refused(release_copy) -> None:
    tree = release_copy("0.10.2")
    before = tree_snapshot(tree)
    r = run("apply", str(tree), "--release", "0.10.1.1")  # installed: the dist-info says 0.10.2
    assert r.returncode == 1 and "--release 0.10.1.1 contradicts" in r.stderr
    assert "METADATA says 0.10.2" in r.stderr
    assert tree_snapshot(tree) == before


def test_wrong_release_on_a_checkout_is_a_hash_mismatch(release_copy) -> None:
    tree = _checkout(release_copy("0.10.2"))
    before = tree_snapshot(tree)
    r = run("apply", str(tree), "--release", "0.10.1.1")
    assert r.returncode == 1
    assert "sha256 mismatch" in r.stdout and "the files are those of vLLM 0.10.2 pristine" in r.stdout
    assert tree_snapshot(tree) == before


def test_dev_version_only_warns(release_copy) -> None:
    tree = _checkout(release_copy("0.10.2"))
    (tree / "vllm/_version.py").write_text("__version__ = version = '0.10.2.dev3+gabc1234'\n")
    r = run("apply", str(tree), "--release", "0.10.2")
    assert r.returncode == 0, r.stderr
    assert "development version" in r.stderr


@pytest.mark.parametrize("bad", ["latest", "0.10", "v0.10.2"])
def test_bad_release_argument_is_usage(bad: str, release_copy) -> None:
    tree = _checkout(release_copy("0.10.2"))
    r = run("status", str(tree), "--release", bad)
    if bad == "0.10":  # well-formed, just a release the series does not know: judged by content
        assert r.returncode == 1 and "unknown release 0.10: file declares ALWAYS" in r.stdout
    else:
        assert r.returncode == 2 and "is not a release number" in r.stderr


def test_help_mentions_source_trees() -> None:
    r = run("apply", "--help")
    assert r.returncode == 0 and "--release X.Y.Z" in r.stdout
    top = run("--help").stdout
    assert "SOURCE tree" in top and "--release" in top
