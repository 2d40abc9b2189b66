"""What the node's background image import counts on the Kubernetes build still taking of the disk: while it runs,
its Go caches' measured peak less what they hold now; once it is done, nothing. And the build's removal of its Go
caches (VLLM_ROCM_TRIM_CACHES=1) holds a lock that a deferred import waits for."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from vllm_rocm_stack import kube_build
from vllm_rocm_stack.disk import tree_bytes


def test_growth_left_is_the_peak_less_the_caches_while_the_build_runs(monkeypatch, tmp_path: Path) -> None:
    cache, lock = tmp_path / "go", tmp_path / ".build.lock"
    (cache / "build" / "ab").mkdir(parents=True)
    (cache / "build" / "ab" / "x-d").write_bytes(b"\0" * 3_000_000)
    held = tree_bytes(cache)
    assert held >= 3_000_000
    lock.touch()
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # what build.sh holds while it runs
        assert kube_build.go_cache_growth_left(cache, lock) == kube_build.GO_CACHE_PEAK - held
        # Caches past the peak: nothing more, never a negative allowance.
        monkeypatch.setattr(kube_build, "GO_CACHE_PEAK", held - 1)
        assert kube_build.go_cache_growth_left(cache, lock) == 0
        fcntl.flock(f, fcntl.LOCK_UN)
    assert kube_build.go_cache_growth_left(cache, lock) == 0


def test_no_build_and_no_cache_take_nothing(tmp_path: Path) -> None:
    assert kube_build.go_cache_growth_left(tmp_path / "absent", tmp_path / "absent.lock") == 0
    assert tree_bytes(tmp_path / "absent") == 0


def test_the_cache_is_where_build_sh_keeps_it(monkeypatch, tmp_path: Path) -> None:
    text = (kube_build.REPO / "tools" / "kube" / "build.sh").read_text()
    assert "GO_CACHE=${VLLM_ROCM_GO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-rocm/go}" in text
    monkeypatch.delenv("VLLM_ROCM_GO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kube_build.go_cache() == tmp_path / "vllm-rocm" / "go"
    monkeypatch.setenv("VLLM_ROCM_GO_CACHE", str(tmp_path / "elsewhere"))
    assert kube_build.go_cache() == tmp_path / "elsewhere"


def _trim_script(tmp_path: Path, cache: Path) -> str:
    """build.sh's own trim_go_caches, run alone (its `say` stubbed), the way the build runs it: with the build's lock
    on fd 9."""
    text = (kube_build.REPO / "tools" / "kube" / "build.sh").read_text()
    m = re.search(r"^trim_go_caches\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert m, "build.sh has no trim_go_caches"
    return (
        f'say() {{ echo "$*"; }}\nGO_CACHE={cache}\nVLLM_ROCM_TRIM_CACHES=1\nexec 9>>{tmp_path / "build.lock"}\n'
        f"{m.group(0)}trim_go_caches\n"
    )


def test_the_caches_removal_holds_the_trim_lock_until_it_is_done(tmp_path: Path) -> None:
    """What the node's deferred pre-import waits for: build.sh takes the lock before it forks the removal (no one can
    find it free before the removal began) and the removal lets go of it only when the caches are gone."""
    cache = tmp_path / "go"
    (cache / "build" / "ab").mkdir(parents=True)
    (cache / "build" / "ab" / "x-d").write_bytes(b"\0" * 100_000)
    gate = tmp_path / "gate"
    shims = tmp_path / "bin"
    shims.mkdir()
    real_nice = shutil.which("nice")
    (shims / "nice").write_text(f'#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\nexec {real_nice} "$@"\n')
    (shims / "nice").chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}"}
    # The script returns once it has forked the removal, which waits at the gate.
    subprocess.run(["bash", "-c", _trim_script(tmp_path, cache)], env=env, check=True, timeout=60)
    trash = list(tmp_path.glob("go.trash-*"))
    assert len(trash) == 1 and cache.is_dir() and not any(cache.iterdir())
    with pytest.raises(TimeoutError, match="still runs"):
        kube_build.wait_for_trims(cache, timeout=0.5)
    gate.touch()
    kube_build.wait_for_trims(cache, timeout=120)
    assert not trash[0].exists()


def test_no_trim_ever_run_is_no_wait(tmp_path: Path) -> None:
    kube_build.wait_for_trims(tmp_path / "go", timeout=0)
