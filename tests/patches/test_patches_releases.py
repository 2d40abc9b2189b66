"""status / apply / verify / idempotence / revert on the real released files of every release."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from vllm_rocm_patches import engine, fsio, pysource, series, target, unidiff

from tests.support.vllm_releases import AITER_FA, REPO_ROOT, tree_snapshot

SSET = series.load(REPO_ROOT / "patches")
PATCHED = ["0.10.1.1", "0.10.2"]
NOTHING_TO_DO = {"0.11.0": "fixed-upstream", "0.32.0": "not-needed", "0.33.0": "not-needed"}
UNKNOWN = {
    "0.14.0": ("fixed-upstream", "UNIFORM_SINGLE_TOKEN_DECODE"),
    "0.20.0": ("not-needed", "UNIFORM_BATCH"),
}


def _tgt(root: Path) -> target.Target:
    return target.detect(target.resolve_root(str(root), None))


def _support(root: Path) -> tuple[str, str] | None:
    return pysource.declared_support(
        (root / AITER_FA).read_text(),
        AITER_FA,
        "AiterFlashAttentionMetadataBuilder",
        ["_cudagraph_support", "cudagraph_support", "full_cudagraph_supported"],
    )


@pytest.mark.parametrize("version", PATCHED)
def test_apply_verify_idempotent_revert(version: str, release_copy, vllm_release) -> None:
    tree = release_copy(version)
    pristine = tree_snapshot(tree)

    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert rep.known and rep.series_id == f"vllm-{version}"
    assert [e.state for e in rep.entries] == ["applicable"] * 3
    assert engine.verify(SSET, _tgt(tree)).exit_code == 1  # not applied yet

    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 0 and rep.changed
    assert [(e.state, e.action) for e in rep.entries] == [("applied", "applied")] * 3
    files = rep.entries[0].files[AITER_FA]
    stacked = rep.entries[1].files[AITER_FA]  # 0002 changes the same file after 0001
    assert files["before"] == files["pristine_sha256"] and stacked["pristine_sha256"] == files["patched_sha256"]
    assert files["after"] == stacked["after"] == stacked["patched_sha256"]
    for e in rep.entries:
        for rel in e.files:
            compile((tree / rel).read_text(), rel, "exec")  # every patched module is valid Python
    assert _support(tree) == ("cudagraph_support", "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE")
    compile((tree / AITER_FA).read_text(), AITER_FA, "exec")  # the patched module is valid Python

    # RECORD now matches every patched file, and only their lines changed
    record = next(tree.glob("vllm-*.dist-info")) / "RECORD"
    changed = sorted({rel for e in rep.entries for rel in e.files})
    assert AITER_FA in changed and len(changed) == (4 if version == "0.10.1.1" else 3)
    for rel in changed:
        data = (tree / rel).read_bytes()
        assert fsio.record_entry(record.read_text(), rel) == (fsio.record_hash(data), str(len(data)))
    old_lines = (next(vllm_release(version).glob("vllm-*.dist-info")) / "RECORD").read_text().splitlines()
    new_lines = record.read_text().splitlines()
    assert [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b] == sorted(
        next(i for i, ln in enumerate(old_lines) if ln.startswith(rel + ",")) for rel in changed
    )

    ver = engine.verify(SSET, _tgt(tree))
    assert ver.exit_code == 0, ver.summary
    assert all(c.ok for e in ver.entries for c in e.postconditions)

    applied = tree_snapshot(tree)
    again = engine.apply(SSET, _tgt(tree))
    assert again.exit_code == 0 and not again.changed
    assert again.summary.startswith("nothing to do") and "applied" in again.summary
    assert tree_snapshot(tree) == applied  # second run changes nothing (not even modes)

    rev = engine.revert(SSET, _tgt(tree))
    assert rev.exit_code == 0 and rev.changed
    assert tree_snapshot(tree) == pristine  # byte-identical to the released files, RECORD included
    assert not engine.revert(SSET, _tgt(tree)).changed


@pytest.mark.parametrize("version", list(NOTHING_TO_DO))
def test_fixed_upstream_and_not_needed_releases(version: str, release_copy) -> None:
    tree = release_copy(version)
    before = tree_snapshot(tree)
    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert [e.state for e in rep.entries] == [NOTHING_TO_DO[version]]
    evidence = rep.entries[0].evidence
    ref = "vllm-0.10.2/0001-rocm-aiter-fa-uniform-single-token-decode.patch"
    if version == "0.11.0":  # the 0.10.2 backport reverse-applies: it *is* the upstream change
        assert evidence == {f"{ref} reverse-applies": True, f"{ref} applies": False}
    else:  # rewritten backend: the patch fits in neither direction
        assert evidence == {f"{ref} reverse-applies": False, f"{ref} applies": False}
    for op in (engine.apply, engine.revert, engine.verify):
        r = op(SSET, _tgt(tree))
        assert r.exit_code == 0 and not r.changed, r.summary
    assert tree_snapshot(tree) == before


@pytest.mark.parametrize("version", list(UNKNOWN))
def test_unknown_release_is_judged_by_content(version: str, release_copy) -> None:
    tree = release_copy(version)
    before = tree_snapshot(tree)
    state, declared = UNKNOWN[version]
    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert not rep.known and rep.series_id is None
    assert [e.state for e in rep.entries] == [state]
    assert rep.entries[0].message.startswith(f"unknown release {version}: file declares {declared} -> ")
    assert engine.apply(SSET, _tgt(tree)).exit_code == 0
    assert engine.verify(SSET, _tgt(tree)).exit_code == 0
    assert tree_snapshot(tree) == before


def test_unknown_release_without_the_file(release_copy) -> None:
    tree = release_copy("0.20.0")
    (tree / AITER_FA).unlink()
    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert [e.state for e in rep.entries] == ["not-needed"]
    assert "is absent" in rep.entries[0].message and rep.exit_code == 0


def test_unknown_release_still_affected_is_not_patched(release_copy) -> None:
    """A release the series does not know whose file still says ALWAYS: say so, exit 1, touch nothing."""
    tree = release_copy("0.10.2")
    for p in [tree / "vllm/_version.py", next(tree.glob("vllm-*.dist-info")) / "METADATA"]:
        p.write_text(p.read_text().replace("0.10.2", "0.10.3"))
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 1 and not rep.changed
    assert [e.state for e in rep.entries] == ["affected"]
    assert "declares ALWAYS" in rep.entries[0].message and "byte-identical" in rep.entries[0].message
    assert tree_snapshot(tree) == before


def test_local_version_suffix_uses_the_release_series(release_copy) -> None:
    """ROCm builds carry a local version (0.10.2+rocm700): the 0.10.2 series and its hash pins apply."""
    tree = release_copy("0.10.2")
    for p in [tree / "vllm/_version.py", next(tree.glob("vllm-*.dist-info")) / "METADATA"]:
        p.write_text(p.read_text().replace("0.10.2", "0.10.2+rocm700", 1))
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 0 and rep.series_id == "vllm-0.10.2"
    assert (
        hashlib.sha256((tree / AITER_FA).read_bytes()).hexdigest()
        == rep.entries[1].files[AITER_FA]["patched_sha256"]  # 0002 is the last patch of the file
    )


@pytest.mark.parametrize("version", PATCHED)
def test_partly_applied_stack_is_completed_and_reverted(version: str, release_copy) -> None:
    """A tree where only 0001 is applied (an older image, or a hand-applied fix): 0001 reads `applied`, the rest
    `applicable`; apply completes the stack, revert undoes all of it in reverse order."""
    tree = release_copy(version)
    pristine = tree_snapshot(tree)
    first = SSET.releases[version].entries[0]
    text = (tree / AITER_FA).read_text()
    (tree / AITER_FA).write_text(unidiff.apply_to_text(text, first.file_patches[0]))
    rep = engine.analyze(SSET, _tgt(tree), "status")
    assert [e.state for e in rep.entries] == ["applied", "applicable", "applicable"], [e.message for e in rep.entries]
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 0 and [e.action for e in rep.entries] == ["none", "applied", "applied"]
    assert engine.verify(SSET, _tgt(tree)).exit_code == 0
    assert engine.revert(SSET, _tgt(tree)).exit_code == 0
    after = tree_snapshot(tree)
    assert {k: v for k, v in after.items() if "RECORD" not in k} == {
        k: v for k, v in pristine.items() if "RECORD" not in k
    }


def test_stack_with_a_foreign_file_state_is_refused(release_copy) -> None:
    """The AITER FA file changed by something else: every patch of that file is a conflict; nothing written."""
    tree = release_copy("0.10.2")
    f = tree / AITER_FA
    f.write_text(f.read_text().replace("torch.float8_e4m3fnuz", "torch.float8_e4m3fn"))
    before = tree_snapshot(tree)
    rep = engine.apply(SSET, _tgt(tree))
    assert rep.exit_code == 1 and not rep.changed
    assert [e.state for e in rep.entries] == ["conflict", "conflict", "applicable"]
    assert "result of the series' patches" in rep.entries[0].message
    assert tree_snapshot(tree) == before
