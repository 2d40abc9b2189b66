"""The kept checkov runs (tests/support/checkov_scan.py): a run is reused only for the same command, checkov lock and
file bytes; the run's own directory (new each time) does not change the key, any changed byte or name does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import checkov_scan


def files(root: Path, text: str = "FROM x\n") -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Dockerfile").write_text(text)
    (root / "chart.yaml").write_text("kind: Deployment\n")
    return [root / "Dockerfile", root / "chart.yaml"]


def cmd(fs: list[Path]) -> list[str]:
    return ["checkov", "--framework", "dockerfile", *(x for f in fs for x in ("-f", str(f)))]


def test_the_same_inputs_in_another_run_directory_have_the_same_key(tmp_path: Path) -> None:
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert checkov_scan._key(cmd(a), a, tmp_path / "a") == checkov_scan._key(cmd(b), b, tmp_path / "b")


def test_a_changed_byte_name_or_framework_changes_the_key(tmp_path: Path) -> None:
    a, b = files(tmp_path / "a"), files(tmp_path / "b", "FROM y\n")
    key = checkov_scan._key(cmd(a), a, tmp_path / "a")
    assert key != checkov_scan._key(cmd(b), b, tmp_path / "b")
    assert key != checkov_scan._key([*cmd(a), "kubernetes"], a, tmp_path / "a")
    renamed = tmp_path / "a" / "Dockerfile.other"
    renamed.write_text("FROM x\n")
    c = [renamed, a[1]]
    assert key != checkov_scan._key(cmd(c), c, tmp_path / "a")


def test_a_kept_run_is_whole_and_the_oldest_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkov_scan, "CACHE_KEEP", 2)
    for i in range(3):  # older runs, a minute apart
        (tmp_path / f"{i}.json").write_text("{}")
        os.utime(tmp_path / f"{i}.json", (1_000_000 + 60 * i, 1_000_000 + 60 * i))
    checkov_scan._keep(tmp_path / "3.json", '{"n": 3}')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.json", "3.json"]
    assert (tmp_path / "3.json").read_text() == '{"n": 3}'
