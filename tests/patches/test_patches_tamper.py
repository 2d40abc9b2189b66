"""Refusals: tampered, wrong, read-only or missing targets get a clear error and the tree stays unchanged."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from vllm_rocm_patches import engine, fsio, series, target
from vllm_rocm_patches.errors import PatchConflict, TargetNotFound, WriteError

from tests.support.vllm_releases import AITER_FA, REPO_ROOT, tree_snapshot

SSET = series.load(REPO_ROOT / "patches")


def _tgt(root: Path) -> target.Target:
    return target.detect(target.resolve_root(str(root), None))


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _set_release(tree: Path, old: str, new: str) -> None:
    for p in [tree / "vllm/_version.py", next(tree.glob("vllm-*.dist-info")) / "METADATA"]:
        p.write_text(p.read_text().replace(f"'{old}'", f"'{new}'").replace(f"Version: {old}\n", f"Version: {new}\n"))


@pytest.mark.parametrize("version", ["0.10.1.1", "0.10.2"])
def test_one_changed_byte_is_a_hash_mismatch(version: str, release_copy) -> None:
    tree = release_copy(version)
    f = tree / AITER_FA
    data = bytearray(f.read_bytes())
    data[100] ^= 0x01  # one byte, somewhere the patch does not even touch
    f.write_bytes(bytes(data))
    before = tree_snapshot(tree)
    expected = SSET.releases[version].entries[0].files[AITER_FA]["pristine_sha256"]
    for op in (engine.apply, engine.revert):
        rep = op(SSET, _tgt(tree))
        assert rep.exit_code == 1 and not rep.changed
        msg = rep.entries[0].message
        assert AITER_FA in msg and "sha256 mismatch" in msg
        assert expected in msg and _sha(f) in msg  # names both hashes
    assert engine.apply(SSET, _tgt(tree), dry_run=True).exit_code == 1
    assert tree_snapshot(tree) == before


def test_wrong_release_is_refused_by_hash(release_copy) -> None:
    """A 0.10.2 tree claiming to be 0.10.1.1: the 0.10.1.1 pin does not match the file."""
    tree = release_copy("0.10.2")
    _set_release(tree, "0.10.2", "0.10.1.1")
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.series_id == "vllm-0.10.1.1" and rep.exit_code == 1
    pin = SSET.releases["0.10.1.1"].entries[0].files[AITER_FA]["pristine_sha256"]
    assert pin in rep.entries[0].message and _sha(tree / AITER_FA) in rep.entries[0].message
    assert "the files are those of vLLM 0.10.2 pristine: wrong release?" in rep.entries[0].message
    assert tree_snapshot(tree) == before


def test_fixed_upstream_release_with_the_bug_is_a_conflict(release_copy) -> None:
    """A 0.10.2 file labelled 0.11.0: the recorded upstream state does not hold, verify/apply fail."""
    tree = release_copy("0.10.2")
    _set_release(tree, "0.10.2", "0.11.0")
    rep = engine.verify(SSET, _tgt(tree))
    assert rep.exit_code == 1
    assert "found AttentionCGSupport.ALWAYS" in rep.summary
    assert engine.apply(SSET, _tgt(tree)).exit_code == 1


def test_disagreeing_version_sources_are_refused(release_copy) -> None:
    tree = release_copy("0.10.2")
    p = tree / "vllm/_version.py"
    p.write_text(p.read_text().replace("'0.10.2'", "'0.11.0'"))
    with pytest.raises(PatchConflict, match=r"ambiguous.*METADATA says 0\.10\.2.*_version\.py says 0\.11\.0"):
        _tgt(tree)


def test_read_only_file_is_refused(release_copy) -> None:
    tree = release_copy("0.10.2")
    f = tree / AITER_FA
    f.chmod(0o444)
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 1 and not rep.changed
    assert re.search(r"rocm_aiter_fa\.py is read-only \(mode 0444\)", rep.summary), rep.summary
    assert rep.to_json()["ok"] is False  # a --report says so too
    assert tree_snapshot(tree) == before  # no temp files left behind either


def test_read_only_record_is_refused_and_source_untouched(release_copy) -> None:
    tree = release_copy("0.10.2")
    record = next(tree.glob("vllm-*.dist-info")) / "RECORD"
    record.chmod(0o444)
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 1 and "RECORD is read-only" in rep.summary
    assert tree_snapshot(tree) == before


def test_missing_target_file_of_a_known_release(release_copy) -> None:
    tree = release_copy("0.10.2")
    (tree / AITER_FA).unlink()
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 1 and f"{AITER_FA}: file missing" in rep.entries[0].message
    assert tree_snapshot(tree) == before


def test_no_vllm_and_no_version(tmp_path: Path, release_copy) -> None:
    with pytest.raises(TargetNotFound, match="does not exist"):
        target.resolve_root(str(tmp_path / "nope"), None)
    with pytest.raises(TargetNotFound, match="no vllm/ package"):
        target.resolve_root(str(tmp_path), None)
    tree = release_copy("0.10.2")
    (tree / "vllm/_version.py").unlink()
    (tree / "vllm/version.py").unlink()
    for p in tree.glob("vllm-*.dist-info"):
        (p / "METADATA").unlink()
    with pytest.raises(TargetNotFound, match="cannot tell the vLLM release"):
        _tgt(tree)


def test_failure_mid_commit_rolls_back(release_copy, monkeypatch: pytest.MonkeyPatch) -> None:
    """The patched source and the RECORD are renamed in one step; a failing second rename undoes the first."""
    tree = release_copy("0.10.1.1")
    before = tree_snapshot(tree)
    real_replace = os.replace
    calls: list[str] = []

    def flaky_replace(src, dst):  # noqa: ANN001 - same signature as os.replace
        calls.append(str(dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(fsio.os, "replace", flaky_replace)
    rep = engine.apply(SSET, _tgt(tree))
    monkeypatch.undo()
    assert rep.exit_code == 1 and "all changes were rolled back" in rep.summary
    assert calls[0].endswith(AITER_FA)  # the first file *was* replaced (the second rename failed)...
    assert tree_snapshot(tree) == before  # ...and restored, with no temp files left
    assert engine.apply(SSET, _tgt(tree)).exit_code == 0  # and a clean retry works


def test_atomic_writer_three_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [tmp_path / f"f{i}" for i in range(3)]
    for i, f in enumerate(files):
        f.write_text(f"old {i}\n")
        f.chmod(0o640)
    before = tree_snapshot(tmp_path)
    real_replace = os.replace
    n = {"calls": 0}

    def fail_third(src, dst):  # noqa: ANN001
        n["calls"] += 1
        if n["calls"] == 3:
            raise OSError(5, "I/O error")
        return real_replace(src, dst)

    w = fsio.AtomicWriter()
    for f in files:
        w.stage(f, b"new\n")
    monkeypatch.setattr(fsio.os, "replace", fail_third)
    with pytest.raises(WriteError):
        w.commit()
    monkeypatch.undo()
    assert tree_snapshot(tmp_path) == before  # contents *and* modes restored


def test_dry_run_writes_nothing(release_copy) -> None:
    tree = release_copy("0.10.2")
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree), dry_run=True)
    assert rep.exit_code == 0 and not rep.changed
    assert [e.action for e in rep.entries] == ["would-apply"] * 3
    assert tree_snapshot(tree) == before
