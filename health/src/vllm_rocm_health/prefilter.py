"""Which log lines can matter at all: a substring prefilter in front of the line parser.

Nearly every line of a busy server is a request, access or stats line that says nothing about CUDA graphs, so
the parser first asks whether a line contains one of a few needles. Offline (`vllm-rocm-health parse`) whole
blocks are scanned at once: with Hyperscan (one SIMD pass for all needles, faster than `grep -E`) when its
wheel is installed, else with one `bytes.find` pass per needle (C speed, about 6x slower than Hyperscan on
14 needles). Both give the same lines (tests/health/test_prefilter.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

# Every line that can produce a parser event contains one of these (tests/health/test_logparse.py checks the
# fixtures and the known message templates). Keep them specific: a needle that request text can contain
# ("failed") turns every request line into a candidate.
NEEDLES: tuple[str, ...] = (
    "udagraph",
    "CUDAGraphMode",
    "CUDA graph",
    "Graph capturing",
    "LLM engine",
    "non-default args",
    "eager",
    "Resolved architecture",
    "KV cache memory",
    "kv_cache_memory_bytes",
    "API server version",
    "█  version ",
    "of memory",
    "rror",
    "Traceback",
    "Overriding",
    "failed to start",
    "initialization failed",
    "backend",
    "vllm-rocm facts",
    "access fault",
    "detected platform",
    "[shutdown]",
)


def _line_test(needles: Iterable[str]) -> Callable[[str], bool]:
    """`line -> bool` as an unrolled chain of `in` tests: faster per line than any() or a regex alternation."""
    expr = " or ".join(f"{n!r} in s" for n in needles)
    return eval(f"lambda s: {expr}")  # noqa: S307 - built from constants


line_may_matter: Callable[[str], bool] = _line_test(NEEDLES)


class FindScanner:
    """One `bytes.find` pass over the block per needle."""

    name = "find"

    def __init__(self, needles: Iterable[str]) -> None:
        self.needles = tuple(n.encode() for n in needles)

    def line_starts(self, block: bytes) -> set[int]:
        starts: set[int] = set()
        find, rfind = block.find, block.rfind
        for needle in self.needles:
            i = find(needle)
            while i >= 0:
                starts.add(rfind(b"\n", 0, i) + 1)
                end = find(b"\n", i)
                if end < 0:
                    break
                i = find(needle, end)
        return starts


class HyperscanScanner:
    """All needles in one Hyperscan pass (literal mode: no regex syntax in the needles)."""

    name = "hyperscan"

    def __init__(self, needles: Iterable[str]) -> None:
        import hyperscan

        encoded = [n.encode() for n in needles]
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(expressions=encoded, ids=list(range(len(encoded))), elements=len(encoded), literal=True)
        self._lock = threading.Lock()  # one scratch space per database: scans must not overlap

    def line_starts(self, block: bytes) -> set[int]:
        ends: list[int] = []
        add = ends.append

        def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            add(end)

        with self._lock:
            self._db.scan(block, match_event_handler=on_match)
        rfind = block.rfind
        return {rfind(b"\n", 0, end) + 1 for end in ends}


Scanner = FindScanner | HyperscanScanner


def make_scanner(prefer: str = "auto") -> Scanner:
    """`auto`: Hyperscan if it loads, else find. `find` / `hyperscan`: that one (hyperscan raises if absent)."""
    if prefer not in ("auto", "find", "hyperscan"):
        raise ValueError(f"unknown prefilter {prefer!r} (auto, find, hyperscan)")
    if prefer != "find":
        try:
            return HyperscanScanner(NEEDLES)
        except Exception as e:  # ImportError, or a CPU the bundled library does not support
            if prefer == "hyperscan":
                raise
            log.info("hyperscan unavailable (%s); using the bytes.find prefilter", e)
    return FindScanner(NEEDLES)


_scanner: Scanner | None = None


def scanner() -> Scanner:
    global _scanner
    if _scanner is None:
        _scanner = make_scanner()
    return _scanner


def candidate_lines(block: bytes, scan: Scanner | None = None) -> list[str]:
    """The lines of `block` (complete `\\n`-terminated lines) that contain a needle, in order, decoded.

    Scanned as bytes, not str: tqdm's `█` would make a decoded block 2-4 bytes per character."""
    starts = (scan or scanner()).line_starts(block)
    find = block.find
    out = []
    for start in sorted(starts):
        end = find(b"\n", start)
        out.append((block[start:] if end < 0 else block[start:end]).decode("utf-8", "replace"))
    return out
