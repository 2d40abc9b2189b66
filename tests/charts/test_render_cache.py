"""The render cache (tests/support/render_cache.py) answers only what helm would answer now: a changed template,
values file, helm environment or helm binary is a new key; what the key cannot see is not cached; a failed render is
kept as it failed; stale entries go. Each answer here is checked against the real helm."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helm_chart import HELM
from tests.support.render_cache import PRUNE_AFTER, RenderCache


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    if not Path(HELM).exists():
        pytest.fail(f"helm not found at {HELM} (run `make setup`)")
    c = tmp_path / "tiny"
    (c / "templates").mkdir(parents=True)
    (c / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\n")
    (c / "values.yaml").write_text("word: one\n")
    (c / "templates" / "cm.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  word: {{ required "word" .Values.word }}\n'
    )
    return c


def render(cache: RenderCache, *args: str) -> tuple[subprocess.CompletedProcess[str], bool]:
    """(helm's answer, whether it came from the cache), as tests/support/helm_chart.py asks."""
    entry = cache.entry(args)
    if entry is not None and (hit := cache.get(entry, args)) is not None:
        return hit, True
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60)
    if entry is not None:
        cache.put(entry, proc)
    return proc, False


def test_a_changed_template_or_values_file_is_rendered_again(chart: Path, tmp_path: Path) -> None:
    cache = RenderCache(tmp_path / "cache", Path(HELM), env={})
    args = ("template", "r", str(chart), "-n", "ns")
    first, hit = render(cache, *args)
    assert not hit and "word: one" in first.stdout
    again, hit = render(RenderCache(tmp_path / "cache", Path(HELM), env={}), *args)  # another process, next run
    assert hit and again.stdout == first.stdout and again.returncode == 0
    (chart / "values.yaml").write_text("word: two\n")
    changed, hit = render(cache, *args)
    assert not hit and "word: two" in changed.stdout
    values = tmp_path / "v.yaml"
    values.write_text("word: three\n")
    with_file, hit = render(cache, *args, "-f", str(values))
    assert not hit and "word: three" in with_file.stdout
    values.write_text("word: four\n")
    with_file, hit = render(cache, *args, "-f", str(values))
    assert not hit and "word: four" in with_file.stdout


def test_a_copy_of_the_chart_elsewhere_is_the_same_key(chart: Path, tmp_path: Path) -> None:
    cache = RenderCache(tmp_path / "cache", Path(HELM), env={})
    render(cache, "template", "r", str(chart))
    copy = tmp_path / "elsewhere" / "tiny"
    shutil.copytree(chart, copy)
    proc, hit = render(cache, "template", "r", str(copy))
    assert hit and "word: one" in proc.stdout


def test_a_failed_render_is_answered_as_it_failed(chart: Path, tmp_path: Path) -> None:
    cache = RenderCache(tmp_path / "cache", Path(HELM), env={})
    args = ("template", "r", str(chart), "--set-json", 'word=""')
    failed, _ = render(cache, *args)
    assert failed.returncode != 0 and "word" in failed.stderr
    again, hit = render(cache, *args)
    assert hit and (again.returncode, again.stdout, again.stderr) == (failed.returncode, failed.stdout, failed.stderr)


def test_what_the_key_cannot_see_is_not_cached(chart: Path, tmp_path: Path) -> None:
    cache = RenderCache(tmp_path / "cache", Path(HELM), env={})
    (tmp_path / "word.txt").write_text("five")
    assert cache.entry(("template", "r", str(chart), "--set-file", f"word={tmp_path / 'word.txt'}")) is None
    assert cache.entry(("template", "r", str(chart), "-f", str(tmp_path / "missing.yaml"))) is None
    assert cache.entry(("template", "r", str(chart / "Chart.yaml"))) is None  # not a chart directory
    assert cache.entry(("lint", str(chart))) is None
    assert cache.entry(("template", "r", str(chart), "-n", "ns")) is not None


def test_another_helm_or_helm_environment_is_another_key_and_its_entries_go(chart: Path, tmp_path: Path) -> None:
    args = ("template", "r", str(chart))
    cache = RenderCache(tmp_path / "cache", Path(HELM), env={})
    render(cache, *args)
    _, hit = render(RenderCache(tmp_path / "cache", Path(HELM), env={"HELM_DEBUG": "true"}), *args)
    assert not hit
    other_helm = tmp_path / "helm-copy"
    shutil.copy(HELM, other_helm)
    with other_helm.open("ab") as f:
        f.write(b"\0")  # another binary (helm still runs: trailing bytes past its sections)
    _, hit = render(RenderCache(tmp_path / "cache", other_helm, env={}), *args)
    assert not hit
    assert len(list((tmp_path / "cache").iterdir())) == 1  # only the last helm's entries are kept


def test_charts_no_run_used_lately_are_pruned(chart: Path, tmp_path: Path) -> None:
    args = ("template", "r", str(chart))
    render(RenderCache(tmp_path / "cache", Path(HELM), env={}), *args)
    [base] = (tmp_path / "cache").iterdir()
    [charts] = base.iterdir()
    old = time.time() - PRUNE_AFTER - 60
    os.utime(charts, (old, old))
    _, hit = render(RenderCache(tmp_path / "cache", Path(HELM), env={}), *args)
    assert not hit  # pruned at the cache's first use, then rendered and kept afresh
    _, hit = render(RenderCache(tmp_path / "cache", Path(HELM), env={}), *args)
    assert hit
