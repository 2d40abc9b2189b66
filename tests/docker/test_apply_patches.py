"""docker/scripts/apply-patches.sh run OUTSIDE Docker, exactly as the Dockerfiles run it, on copies of the
real release trees (tests/support/vllm_releases.py): applies, verifies, writes the reports and the versions
file; refuses tampered trees and trees that are not what the image is labelled with."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from vllm_rocm_stack import generate

from tests.support.repo import DOCKER, REPO
from tests.support.venvs import make_venv
from tests.support.vllm_releases import AITER_FA, SUPPORTED_VERSIONS, tree_snapshot

SCRIPT = DOCKER / "scripts" / "apply-patches.sh"
gen_bake = generate.gen_bake()

SPECS = {s.release: s for s in gen_bake.load_matrix()[1]}


def run(*args: str | Path) -> subprocess.CompletedProcess:
    # A bare environment: nothing from the caller's PYTHONPATH may leak in (the build has none either).
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def read_versions(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expectations(version: str) -> list[str]:
    spec = SPECS[version]
    return [
        "--expect-release",
        version,
        "--expect-patch-level",
        str(spec.patch_level),
        "--expect-series-sha256",
        spec.series_sha256,
    ]


def series_json(version: str) -> dict:
    return json.loads((REPO / "patches" / f"vllm-{version}" / "series.json").read_text())


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_applies_verifies_and_records(version: str, release_copy: Callable[[str], Path], tmp_path: Path) -> None:
    tree = release_copy(version)
    out = tmp_path / "out"
    res = run("--target", tree, "--out-dir", out, *expectations(version))
    assert res.returncode == 0, res.stdout + res.stderr

    report = json.loads((out / "patch-report.json").read_text())
    assert report["ok"] is True and report["command"] == "verify"
    assert report["release"]["release"] == version

    versions = read_versions(out / "versions")
    spec = SPECS[version]
    assert versions["vllm_release"] == version
    assert versions["patch_level"] == str(spec.patch_level)
    assert versions["image_tag"] == f"{version}-p{spec.patch_level}"
    assert versions["patch_series_sha256"] == spec.series_sha256
    assert versions["patch_series"] == f"vllm-{version}"

    # on disk: a patched release has the bytes its last patch of the file leaves, a p0 release is untouched
    entries = [e for e in series_json(version)["entries"] if AITER_FA in e["files"]]
    pins = entries[-1]["files"][AITER_FA]
    patched = entries[-1]["state"] == "patch"
    assert sha256(tree / AITER_FA) == (pins["patched_sha256"] if patched else pins["pristine_sha256"])
    # the stored report and the versions file name the known issues the applied series fixes
    assert versions["fixes_issues"] == spec.fixes_issues
    assert report["known_issues"]["fixed_by_applied_patches"] == [i for i in spec.fixes_issues.split(",") if i]
    assert bool(spec.fixes_issues) == patched

    # idempotent: a second run (what the source build's runtime stage does) changes nothing and succeeds
    before = tree_snapshot(tree)
    again = run("--target", tree, "--out-dir", tmp_path / "again", *expectations(version))
    assert again.returncode == 0, again.stderr
    assert tree_snapshot(tree) == before
    assert json.loads((tmp_path / "again" / "apply-report.json").read_text())["changed"] is False


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if SPECS[v].patch_level > 0])
def test_tampered_tree_fails_clearly(version: str, release_copy: Callable[[str], Path], tmp_path: Path) -> None:
    tree = release_copy(version)
    target = tree / AITER_FA
    target.write_text(target.read_text() + "\n# local change\n")
    tampered = tree_snapshot(tree)
    out = tmp_path / "out"
    res = run("--target", tree, "--out-dir", out, *expectations(version))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "the patch series did not apply" in res.stderr
    assert "sha256 mismatch" in res.stdout + res.stderr
    assert not (out / "versions").exists(), "a failed run must not leave a versions file"
    assert tree_snapshot(tree) == tampered, "nothing may be changed on a refused tree"


def test_unpatched_file_with_a_patched_release_fails_postcondition(
    release_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    # A 0.11.0 tree (nothing to apply) whose file was reverted to the buggy 0.10.2 line: the fixed-upstream
    # post-condition must fail the build rather than ship an image labelled "fixed".
    tree = release_copy("0.11.0")
    path = tree / AITER_FA
    text = path.read_text()
    assert "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE" in text
    path.write_text(text.replace("AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE", "AttentionCGSupport.ALWAYS"))
    res = run("--target", tree, "--out-dir", tmp_path / "out", *expectations("0.11.0"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert not (tmp_path / "out" / "versions").exists()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--expect-release", "0.11.0", "expected vLLM 0.11.0 but the tree is vLLM 0.10.2"),
        ("--expect-patch-level", "0", "expected patch level p0 but series vllm-0.10.2 holds 3 patch(es)"),
        ("--expect-series-sha256", "0" * 64, "expected series sha256 " + "0" * 64),
    ],
)
def test_label_mismatch_fails_before_touching_the_tree(
    flag: str, value: str, message: str, release_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    tree = release_copy("0.10.2")
    pristine = tree_snapshot(tree)
    res = run("--target", tree, "--out-dir", tmp_path / "out", flag, value)
    assert res.returncode == 1, res.stdout + res.stderr
    assert message in res.stderr
    assert "not what the image is labelled with" in res.stderr
    assert tree_snapshot(tree) == pristine


def _as_sdist(tree: Path, version: str) -> Path:
    """An unpacked sdist: vllm/ and PKG-INFO, no dist-info (the released files are the sdist's files)."""
    for d in tree.glob("vllm-*.dist-info"):
        shutil.rmtree(d)
    (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\n")
    return tree


def test_source_tree_with_release(release_copy: Callable[[str], Path], tmp_path: Path) -> None:
    tree = _as_sdist(release_copy("0.10.1.1"), "0.10.1.1")
    res = run("--target", tree, "--release", "0.10.1.1", "--out-dir", tmp_path / "out", *expectations("0.10.1.1"))
    assert res.returncode == 0, res.stdout + res.stderr
    versions = read_versions(tmp_path / "out" / "versions")
    assert versions["vllm_tree"] == "source" and versions["image_tag"] == "0.10.1.1-p3"
    assert sha256(tree / AITER_FA) == series_json("0.10.1.1")["entries"][1]["files"][AITER_FA]["patched_sha256"]


def test_source_tree_release_must_agree_with_pkg_info(release_copy: Callable[[str], Path], tmp_path: Path) -> None:
    tree = _as_sdist(release_copy("0.10.2"), "0.10.2")
    pristine = tree_snapshot(tree)
    res = run("--target", tree, "--release", "0.10.1.1", "--out-dir", tmp_path / "out")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "contradicts" in res.stderr
    assert tree_snapshot(tree) == pristine


def test_installed_vllm_via_python(release_copy: Callable[[str], Path], tmp_path: Path) -> None:
    # The image path: --python names the interpreter vLLM runs under; its site-packages is found without
    # importing vLLM, and the changed file's stale bytecode is replaced by a fresh compile.
    py, site = make_venv(tmp_path / "venv")
    tree = release_copy("0.10.2")
    for item in tree.iterdir():
        shutil.move(str(item), site / item.name)
    cache = site / Path(AITER_FA).parent / "__pycache__"
    cache.mkdir()
    stale = cache / "rocm_aiter_fa.cpython-99.pyc"
    stale.write_bytes(b"compiled from the released file")
    other = cache / "utils.cpython-99.pyc"
    other.write_bytes(b"untouched")

    res = run("--python", py, "--out-dir", tmp_path / "out", *expectations("0.10.2"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert not stale.exists() and other.exists()
    assert list(cache.glob("rocm_aiter_fa.cpython-*.pyc")), "the patched file was not recompiled"
    assert read_versions(tmp_path / "out" / "versions")["vllm_tree"] == "installed"
    assert sha256(site / AITER_FA) == series_json("0.10.2")["entries"][1]["files"][AITER_FA]["patched_sha256"]


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--out-dir", "OUT"],
        ["--target", "TREE", "--python", "python3", "--out-dir", "OUT"],
        ["--target", "TREE", "--out-dir", "OUT", "--expect-patch-level", "one"],
        ["--target", "TREE", "--out-dir", "OUT", "--bogus"],
        ["--target", "/nonexistent", "--out-dir", "OUT"],
    ],
)
def test_bad_usage_exits_2(args: list[str], release_copy: Callable[[str], Path], tmp_path: Path) -> None:
    tree = release_copy("0.10.2")
    argv = [str(tree) if a == "TREE" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    res = run(*argv)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "apply-patches: error:" in res.stderr


def test_not_a_vllm_tree_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run("--target", empty, "--out-dir", tmp_path / "out")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "cannot read the vLLM tree" in res.stderr
