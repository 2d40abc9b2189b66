"""The sidecar observes the node's GPU architecture (issue 30: rows that depend on it stayed `possible` when nobody
named it, and a verified wrong-tokens configuration on gfx950 was Ready)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from vllm_rocm_health import gpu
from vllm_rocm_health.known_issues import KnownIssueJudge
from vllm_rocm_health.state import LogState

from tests.support.kfd import TARGETS, write_topology

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"
FNUZ = "aiter-fa-fp8-kv-cache-fnuz-view"


@pytest.mark.parametrize(("arch", "version"), sorted(TARGETS.items()))
def test_target_versions_name_the_arch(arch: str, version: int) -> None:
    assert gpu.gfx_name(version) == arch


def test_what_is_not_a_gpu_target() -> None:
    assert [gpu.gfx_name(v) for v in (0, -1, 12, 91600, 90016, 1000000)] == [None] * 6


def test_observe(tmp_path: Path) -> None:
    one = gpu.observe(write_topology(tmp_path / "a", *["gfx942"] * 8))
    assert one.arch == "gfx942" and "gfx942 x8" in one.detail
    mixed = gpu.observe(write_topology(tmp_path / "b", "gfx942", "gfx950"))
    assert mixed.arch is None and "several architectures" in mixed.detail
    cpu_only = gpu.observe(write_topology(tmp_path / "c"))
    assert cpu_only.arch is None and "no GPU node" in cpu_only.detail
    missing = gpu.observe(tmp_path / "nowhere")
    assert missing.arch is None and "no KFD topology" in missing.detail
    garbage = write_topology(tmp_path / "d", "gfx950")
    (garbage / "1" / "properties").write_bytes(b"\xff\x00gfx_target_version banana\n" * 100)
    assert gpu.observe(garbage).arch is None


def _state(name: str) -> LogState:
    state = LogState()
    for line in (FIXTURES / name).read_text().splitlines():
        state.feed(line)
    return state


def _judge(tmp_path: Path, *archs: str, told: str = "") -> KnownIssueJudge:
    judge = KnownIssueJudge(environ={"VLLM_HEALTH_GPU_ARCH": told} if told else {})
    judge.observe_gpu(str(write_topology(tmp_path / "-".join(archs or ("none",)), *archs)))
    return judge


def test_a_row_only_the_arch_leaves_open_holds_the_pod_until_the_arch_is_known(tmp_path: Path) -> None:
    """0.10.2, AITER FA, FP8 KV cache: the fnuz row is verified wrong tokens on gfx950 (and gfx90a), not gfx942."""
    state = _state("v0.10.2-image-aiter-fa-full-fp8kv.log")
    unknown = _judge(tmp_path)
    assert unknown.arch(state.image_facts) == (None, "unknown")
    assert [r.split(":")[0] for r in unknown.arch_undecided(state, ())] == [FNUZ]
    assert unknown.arch_undecided(state, (FNUZ,)) == []  # allowed on purpose
    for arch, blocks in (("gfx950", True), ("gfx942", False)):
        judge = _judge(tmp_path, arch)
        assert judge.arch(state.image_facts) == (arch, "observed")
        assert judge.arch_undecided(state, ()) == []
        assert any(r.startswith(FNUZ) for r in judge.blocking(state, ())[1]) is blocks
    named = _judge(tmp_path, told="gfx942")  # not observed: what the operator named counts
    assert named.arch(state.image_facts) == ("gfx942", "operator") and named.arch_undecided(state, ()) == []


def test_what_is_observed_wins_over_what_is_told(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = _state("v0.10.2-image-aiter-fa-full-fp8kv.log")
    with caplog.at_level(logging.WARNING):
        judge = _judge(tmp_path, "gfx950", told="gfx942")
    assert judge.arch(state.image_facts) == ("gfx950", "observed")
    assert "judging known issues on what the node has" in caplog.text
    assert any(r.startswith(FNUZ) for r in judge.blocking(state, ())[1])
