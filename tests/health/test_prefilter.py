"""The block prefilter: Hyperscan and the bytes.find fallback pick exactly the lines the per-line test picks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm_rocm_health import prefilter
from vllm_rocm_health.prefilter import NEEDLES, FindScanner, HyperscanScanner, candidate_lines, make_scanner

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"
SCANNERS = [FindScanner(NEEDLES), HyperscanScanner(NEEDLES)]


def by_line(block: bytes) -> list[str]:
    """The reference: split, decode, test each line on its own."""
    lines = block.decode("utf-8", "replace").split("\n")
    if block.endswith(b"\n"):
        lines.pop()
    return [x for x in lines if prefilter.line_may_matter(x)]


text = st.lists(
    st.one_of(
        st.sampled_from(NEEDLES), st.sampled_from(["█", "\r", "ü", " ", "x", "\x00", "\n"]), st.text(max_size=30)
    ),
    max_size=30,
).map("".join)


@pytest.mark.parametrize("scan", SCANNERS, ids=lambda s: s.name)
def test_fixtures_pick_the_same_lines(scan: FindScanner | HyperscanScanner) -> None:
    for path in sorted(FIXTURES.glob("*.log")):
        block = path.read_bytes()
        assert candidate_lines(block, scan) == by_line(block), path.name


@settings(max_examples=300, deadline=None)
@given(text, st.booleans())
def test_both_scanners_equal_the_line_test(s: str, terminated: bool) -> None:
    block = s.encode("utf-8", "surrogatepass")
    if terminated and not block.endswith(b"\n"):
        block += b"\n"
    want = by_line(block) if block.endswith(b"\n") or not block else by_line(block + b"\n")
    for scan in SCANNERS:
        assert candidate_lines(block, scan) == want, scan.name


def test_a_needle_at_the_very_start_and_end_of_a_block() -> None:
    block = b"eager\nnothing here\nx CUDA graph"
    for scan in SCANNERS:
        assert candidate_lines(block, scan) == ["eager", "x CUDA graph"]


def test_request_text_does_not_make_candidates() -> None:
    """User prompt text in request logs ('failed logins') must not turn request lines into candidates."""
    line = (
        b"(APIServer pid=1) INFO 12-02 11:00:00 [logger.py:43] Received request cmpl-1: prompt: 'customer reports"
        b" 3 failed logins', params: SamplingParams(n=1)\n"
    )
    for scan in SCANNERS:
        assert candidate_lines(line * 100, scan) == []


def test_make_scanner_choices() -> None:
    assert make_scanner("find").name == "find"
    assert make_scanner("hyperscan").name == "hyperscan"
    assert make_scanner().name == "hyperscan"  # the locked venv has the wheel
    with pytest.raises(ValueError, match="unknown prefilter"):
        make_scanner("grep")
