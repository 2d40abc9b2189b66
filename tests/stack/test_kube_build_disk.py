"""What the image builds and the node's image import count on the Kubernetes build still taking of the disk: while it
runs, its Go caches' measured peak less what they hold now; once it is done, nothing. CI's machine (~34 GB free) came
within 0.4 GB of a fixed 6 GB allowance and waited 14 min for a build whose caches never pass 3.3 GB."""

from __future__ import annotations

import fcntl
from pathlib import Path

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
