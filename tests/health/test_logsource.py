"""The file log source in-process: start position, partial lines, truncation, rotation, a file that appears late."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

from vllm_rocm_health.logsource import follow_file, retrying


class Follower:
    """Runs `follow_file` in a thread. Tests wait on what the follower did (its loop passes, its up/down
    reports), never on a clock: on a busy machine its thread may not run for seconds."""

    def __init__(self, path: Path, from_start: bool = True) -> None:
        self.stop = threading.Event()
        self.q: queue.Queue[str] = queue.Queue()
        self.up: list[bool] = []
        self.passes = 0
        self.changed = threading.Condition()
        gen = follow_file(str(path), self.stop, poll=0.02, from_start=from_start, on_up=self._on_up, beat=self._beat)
        self.t = threading.Thread(target=lambda: [self.q.put(x) for x in gen], daemon=True)
        self.t.start()

    def _on_up(self, up: bool, _why: str) -> None:
        with self.changed:
            self.up.append(up)
            self.changed.notify_all()

    def _beat(self) -> None:
        with self.changed:
            self.passes += 1
            self.changed.notify_all()

    def wait_up(self, up: bool, timeout: float = 60) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.up and self.up[-1] is up, timeout), self.up

    def settle(self, timeout: float = 60) -> None:
        """Returns once a whole pass of the follower's loop began after this call: everything written before
        it has been seen (read, or found truncated or replaced)."""
        with self.changed:
            want = self.passes + 2
            assert self.changed.wait_for(lambda: self.passes >= want, timeout), "the follower stopped"

    def take(self, n: int, timeout: float = 60) -> list[str]:
        return [self.q.get(timeout=timeout) for _ in range(n)]

    def close(self) -> None:
        self.stop.set()
        self.t.join(10)
        assert not self.t.is_alive(), "the follower did not stop"


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def test_from_end_partial_line_truncation_rotation(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("old line\n")
    fol = Follower(log, from_start=False)
    try:
        fol.wait_up(True)  # opened, at its end
        _append(log, "first\nsec")  # the partial `sec` is held back until its newline
        assert fol.take(1) == ["first"]
        _append(log, "ond\n")
        assert fol.take(1) == ["second"]
        log.write_text("")  # truncation (copytruncate)
        fol.settle()  # seen before the next write makes the file longer than the old offset
        _append(log, "after truncate\n")
        assert fol.take(1) == ["after truncate"]
        os.rename(log, tmp_path / "vllm.log.1")  # rotation: a new file under the same name
        log.write_text("rotated 1\nrotated 2\n")
        assert fol.take(2) == ["rotated 1", "rotated 2"]
        assert fol.q.empty() and fol.up[0] is True
    finally:
        fol.close()


def test_a_write_that_splits_a_character_is_not_a_truncation(tmp_path: Path) -> None:
    """Block-buffered writers flush mid-character (tqdm's `█` is 3 bytes): the follower must wait for the rest,
    not mistake the pause for a truncation and read the whole log again (which would count its lines twice)."""
    log = tmp_path / "vllm.log"
    bar = "Capturing CUDA graphs (decode, FULL): 50%|█████     | 5/10\n".encode()
    cut = bar.index("█".encode()) + 1
    log.write_bytes(b"engine line\n" + bar[:cut])
    fol = Follower(log)
    try:
        assert fol.take(1) == ["engine line"]
        fol.settle()  # the follower polls at EOF with half a character buffered
        with open(log, "ab") as f:
            f.write(bar[cut:] + b"next\n")
        assert fol.take(2) == [bar.decode().rstrip("\n"), "next"]
        fol.settle()
        assert fol.q.empty(), "lines were read twice"
    finally:
        fol.close()


def test_waits_for_the_file_to_appear(tmp_path: Path) -> None:
    log = tmp_path / "late.log"
    fol = Follower(log)
    try:
        fol.wait_up(False)  # reported down while the file is missing
        log.write_text("hello\n")
        assert fol.take(1) == ["hello"]
        assert fol.up[-1] is True
    finally:
        fol.close()


def test_retrying_survives_a_source_that_raises() -> None:
    stop = threading.Event()
    calls = {"n": 0}
    ups: list[bool] = []

    def make():
        calls["n"] += 1
        yield f"line {calls['n']}"
        if calls["n"] < 3:
            raise ConnectionError("API went away")  # failure injection: the stream breaks mid-way
        stop.set()

    got = list(retrying(make, stop, lambda up, _why: ups.append(up), backoff=0.01))
    assert got == ["line 1", "line 2", "line 3"]
    assert ups.count(False) >= 2


def test_line_splitter_cuts_long_lines_and_drops_their_rest() -> None:
    from vllm_rocm_health.logsource import LineSplitter

    s = LineSplitter(max_line=10)
    assert s.feed(b"short\nabc") == ["short"]
    out = s.feed(b"defghijklmnop")  # the line passes 10 bytes: handed on cut, the rest is dropped
    assert out == ["abcdefghij [line cut]"]
    # The rest of that line, even if it looks like a log line, never comes out as a line of its own.
    assert s.feed(b"Graph capturing finished in 1 secs\nnext line\n") == ["next line"]
    assert s.feed(b"\xff\xfe tail") == [] and s.flush() == ["\ufffd\ufffd tail"]


def test_k8s_stream_holds_bounded_memory() -> None:
    """A 5 MB chunk without a newline from the API server is cut, not accumulated."""
    import threading as th
    from types import SimpleNamespace

    from vllm_rocm_health.k8s_logs import PodLogFollower

    class Api:
        def read_namespaced_pod(self, *a, **k):
            return SimpleNamespace(status=SimpleNamespace(container_statuses=[]))

        def read_namespaced_pod_log(self, *a, **kw):
            assert kw["_request_timeout"][1] > 0  # a half-open stream cannot block forever

            def gen():
                yield b"2026-12-03T00:00:00.1Z " + b"x" * (5 << 20)
                yield b"\n2026-12-03T00:00:00.2Z after\n"

            return SimpleNamespace(stream=gen)

    lines = list(PodLogFollower(Api(), "ns", "p", "vllm").stream(th.Event()))
    assert len(lines) == 2 and len(lines[0]) < (1 << 20) + 100 and lines[1] == "after"
