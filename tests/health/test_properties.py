"""Property tests: whatever the log holds, the parser never crashes and never reports a capture that did not finish."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from vllm_rocm_health.state import LogState

FRAGMENTS = [
    "Capturing CUDA graphs (decode, FULL): 50%|██| 5/10",
    "Graph capturing finished in",
    "Graph capturing finished in x",
    "Initializing a V1 LLM engine (v0.14.0) with config: 'cudagraph_mode': <CUDAGraphMode.FULL: 2>",
    '"cudagraph_mode":[2,1]',
    "CUDAGraphMode.FULL is not supported with X backend (support: AttentionCGSupport.NEVER);",
    "non-default args: {'cudagraph_mode': 'FULL'",
    "Available KV cache memory",
    "HIP out of memory",
    "\r",
    "\x1b[31m",
    "Traceback (most recent call last):",
    "enforce_eager=True",
    "\x00",
    "ü",
    "|",
    "/",
]
line = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=8).map("".join)


def finished_line_present(lines: list[str]) -> bool:
    import re

    return any(re.search(r"Graph capturing finished in \d+ secs?, took -?[\d.]+ GiB", x) for x in lines)


@settings(max_examples=300, deadline=None)
@given(st.lists(line, max_size=40))
def test_never_crashes_never_false_success(lines: list[str]) -> None:
    state = LogState()
    for x in lines:
        state.feed(x)
    s = state.summary()
    if s["capture_finished"]:
        assert finished_line_present(lines)
    assert 0.0 <= s["progress"] <= 1.0


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=20), st.integers(min_value=1, max_value=1 << 20))
def test_huge_lines(chunk: str, size: int) -> None:
    state = LogState()
    state.feed((chunk * (size // len(chunk) + 1))[:size])
    state.feed("Graph capturing finished in 1 secs, took 0.1 GiB" + "x" * size)  # before KV cache: profile only
    assert not state.engine.capture_finished


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30), st.randoms())
def test_truncated_and_interleaved(parts: list[str], rnd) -> None:
    lines = ["".join(parts[i : i + 3])[: rnd.randint(0, 200)] for i in range(0, len(parts), 3)]
    rnd.shuffle(lines)
    state = LogState()
    for x in lines:
        state.feed(x)
    if state.engine.capture_finished:
        assert finished_line_present(lines)


@settings(max_examples=150, deadline=None)
@given(st.lists(line.map(lambda x: x.replace("\n", " ")), max_size=30))
def test_block_fast_path_equals_line_by_line(lines: list[str]) -> None:
    """`parse` feeds whole blocks through the bytes prefilter; it must reach the same state as feeding each line."""
    one, block = LogState(), LogState()
    for x in lines:
        one.feed(x)
    data = "".join(x + "\n" for x in lines).encode("utf-8", "surrogatepass")
    assert block.feed_block(data) == len(lines)
    assert block.summary() == one.summary()
