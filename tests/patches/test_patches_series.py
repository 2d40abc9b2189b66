"""The series directory itself: DEP-3 headers, quilt series files, metadata pinned to the real releases."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from vllm_rocm_known_issues import evaluator as known_issues
from vllm_rocm_patches import dep3, engine, series, target, unidiff
from vllm_rocm_patches.errors import SeriesError

from tests.support.vllm_releases import AITER_FA, REPO_ROOT, SUPPORTED_VERSIONS

SERIES_DIR = REPO_ROOT / "patches"

RELEASE_DIRS = sorted(p for p in SERIES_DIR.glob("vllm-*") if p.is_dir())
KNOWN = known_issues.load(REPO_ROOT / "known-issues" / "known-issues.json")


# What the series records for the releases it was built for (a release added later brings its own row and series).
STATES = {
    "0.10.1.1": ["patch", "patch", "patch"],
    "0.10.2": ["patch", "patch", "patch"],
    "0.11.0": ["fixed-upstream"],
    "0.32.0": ["not-needed"],
    "0.33.0": ["not-needed"],
}


def test_series_covers_the_supported_releases() -> None:
    sset = series.load(SERIES_DIR)
    assert set(sset.releases) == set(SUPPORTED_VERSIONS)  # releases.json's rows
    states = {r: [e.state for e in rs.entries] for r, rs in sset.releases.items()}
    assert {r: states[r] for r in STATES} == STATES


@pytest.mark.parametrize("release_dir", RELEASE_DIRS, ids=lambda p: p.name)
def test_series_file_lists_exactly_the_patch_files(release_dir: Path) -> None:
    listed = series.read_series_file(release_dir / "series")
    present = sorted(p.name for p in release_dir.glob("*.patch"))
    assert sorted(listed) == present
    assert len(set(listed)) == len(listed)


@pytest.mark.parametrize("patch", sorted(SERIES_DIR.glob("vllm-*/*.patch")), ids=lambda p: p.parent.name)
def test_dep3_header_has_required_fields(patch: Path) -> None:
    """Every patch carries the DEP-3 fields and says what the known-issues row it fixes says: its upstream
    change (Origin / Bug) and the first release that has it (Applied-Upstream)."""
    fields = dep3.parse_header(patch.read_text())
    assert dep3.missing_fields(fields) == []
    assert len(fields["Description"].splitlines()) > 1  # a summary plus the why
    release = patch.parent.name.removeprefix("vllm-")
    rows = [i for i in KNOWN.issues if i.patches.get(release) == patch.name]
    assert rows, f"{patch} fixes no row of known-issues.json"
    fixed = {i.first_fixed for i in rows}
    upstream = {i.raw["fix"]["upstream"] for i in rows}
    assert fields["Applied-Upstream"].split(",")[0].strip() in fixed
    assert any(u and u in fields["Origin"] for u in upstream) or any(u and u in fields["Bug"] for u in upstream)


def test_dep3_missing_fields_are_reported() -> None:
    assert dep3.missing_fields(dep3.parse_header("Description: x\nOrigin: y\n---\n")) == [
        "Bug",
        "Applied-Upstream",
        "Last-Update",
    ]


@pytest.mark.parametrize("release_dir", RELEASE_DIRS, ids=lambda p: p.name)
def test_pinned_pristine_hashes_are_the_real_released_files(release_dir: Path, vllm_release) -> None:
    """The first pin of every file (before any patch of the series touches it) is the released file; a stacked
    patch's pin is the previous patch's result (series.load checks the chain)."""
    rs = series.load(SERIES_DIR).releases[release_dir.name.removeprefix("vllm-")]
    tree = vllm_release(rs.release)
    firsts = {rel: chain[0] for rel, chain in series.file_chains(rs.entries).items()}
    firsts.update({rel: h["pristine_sha256"] for e in rs.entries if e.state != "patch" for rel, h in e.files.items()})
    assert firsts
    for rel, pin in firsts.items():
        assert hashlib.sha256((tree / rel).read_bytes()).hexdigest() == pin, rel


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")
@pytest.mark.parametrize("release", ["0.10.1.1", "0.10.2"])
def test_gnu_patch_agrees_with_the_strict_applier(release: str, release_copy) -> None:
    """Cross-check our applier against GNU patch on the real files: the quilt series applied in order with no
    fuzz gives the same bytes as the tool's apply."""
    ours = release_copy(release)
    gnu = Path(shutil.copytree(ours, ours.parent / "gnu"))
    assert engine.apply(series.load(SERIES_DIR), target.detect(ours)).exit_code == 0
    for name in series.read_series_file(SERIES_DIR / f"vllm-{release}" / "series"):
        patch_file = SERIES_DIR / f"vllm-{release}" / name
        subprocess.run(
            ["patch", "-p1", "--fuzz=0", "--quiet", "--no-backup-if-mismatch", "-i", str(patch_file)],
            cwd=gnu,
            check=True,
        )
    changed = {
        fp.path
        for name in series.read_series_file(SERIES_DIR / f"vllm-{release}" / "series")
        for fp in unidiff.parse((SERIES_DIR / f"vllm-{release}" / name).read_text())
    }
    assert len(changed) >= 3
    for rel in changed:
        assert (gnu / rel).read_bytes() == (ours / rel).read_bytes(), rel


def test_series_hash_changes_with_any_patch_byte(tmp_path: Path) -> None:
    copy = tmp_path / "patches"
    shutil.copytree(SERIES_DIR, copy, ignore=shutil.ignore_patterns("src", "*.md"))
    before = series.load(copy)
    p = next(copy.glob("vllm-0.10.2/*.patch"))
    p.write_text(p.read_text().replace("Last-Update: ", "Last-Update:  "))
    after = series.load(copy)
    assert after.sha256 != before.sha256
    assert after.series_sha256("0.10.2") != before.series_sha256("0.10.2")
    assert after.series_sha256("0.10.1.1") == before.series_sha256("0.10.1.1")


def test_broken_series_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "patches"
    shutil.copytree(SERIES_DIR, copy, ignore=shutil.ignore_patterns("src", "*.md"))
    (copy / "vllm-0.10.2" / "series").write_text("0001-missing.patch\n")
    with pytest.raises(SeriesError, match="series' lists"):
        series.load(copy)


def test_metadata_hash_mismatch_with_patch_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "patches"
    shutil.copytree(SERIES_DIR, copy, ignore=shutil.ignore_patterns("src", "*.md"))
    meta_path = copy / "vllm-0.10.2" / "series.json"
    meta = json.loads(meta_path.read_text())
    meta["entries"][0]["files"]["vllm/other.py"] = meta["entries"][0]["files"].pop(AITER_FA)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(SeriesError, match="pins hashes for"):
        series.load(copy)
