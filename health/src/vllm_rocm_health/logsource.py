"""Where the vLLM log comes from: a file (followed across rotation and truncation), stdin, or nothing.
The Kubernetes API source is in k8s_logs.py."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import one_line

log = logging.getLogger(__name__)

OnUp = Callable[[bool, str], None]  # (connected, why not)
MAX_LINE = 1 << 20  # bytes kept of one line; the rest of a longer line is dropped, never held


class LineSplitter:
    """Bytes in, whole decoded lines out, with bounded memory on every source: a line longer than `max_line` is
    cut there and the rest of it up to the next newline is dropped (not handed on as lines of its own, which
    would let the tail of a huge request line pose as a log line of its own). Undecodable bytes are replaced."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buf = b""
        self._dropping = False

    def feed(self, chunk: bytes) -> list[str]:
        out = []
        lines = chunk.split(b"\n")
        for i, part in enumerate(lines):
            last = i == len(lines) - 1
            if self._dropping:
                if not last:
                    self._dropping = False
                continue
            self._buf += part
            if not last:
                out.append(self._buf.decode("utf-8", "replace"))
                self._buf = b""
            elif len(self._buf) > self.max_line:
                out.append(self._buf[: self.max_line].decode("utf-8", "replace") + " [line cut]")
                self._buf = b""
                self._dropping = True
        return out

    def flush(self) -> list[str]:
        """The unterminated last line, if any (the source ended or was replaced)."""
        rest, self._buf, self._dropping = self._buf, b"", False
        return [rest.decode("utf-8", "replace")] if rest else []


def file_problem(path: str) -> tuple[str, bool]:
    """(what is wrong with a log file path, whether it is wrong for good). A missing file is normal before vLLM
    starts writing it (the follower waits), unless even its directory is missing."""
    p = Path(path)
    if p.is_dir():
        return f"{path} is a directory, not a log file", True
    if not p.exists():
        if not p.parent.is_dir():
            return f"{path}: directory {p.parent} does not exist", True
        return f"log file {path} does not exist (yet)", False
    try:
        with open(p, "rb"):
            pass
    except OSError as e:
        return f"log file {path} is not readable: {e.strerror or e}", True
    return "", False


def follow_file(
    path: str,
    stop: threading.Event,
    poll: float = 0.2,
    from_start: bool = True,
    on_up: OnUp | None = None,
    beat: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Yield lines appended to `path`, like `tail -F`: waits for the file to appear, reopens it when it is
    replaced (rotation), and starts over when it shrinks (truncation). A partial last line is held back.

    Read as bytes and decoded a whole line at a time: a writer may flush half a multi-byte character, and a
    text-mode tell() there is a decoder cookie, not a file offset (it looked like a truncation)."""
    f: BinaryIO | None = None
    ino = None
    lines = LineSplitter()
    while not stop.is_set():
        if beat:
            beat()
        if f is None:
            try:
                f = open(path, "rb")  # noqa: SIM115 - a directory raises IsADirectoryError here
            except OSError:
                if on_up:
                    on_up(False, file_problem(path)[0] or f"cannot open {path}")
                stop.wait(poll)
                continue
            ino = os.fstat(f.fileno()).st_ino
            if not from_start:
                f.seek(0, os.SEEK_END)
            from_start = True  # a rotated-in file is read from its start
            if on_up:
                on_up(True, "")
        chunk = f.read(1 << 16)
        if chunk:
            yield from lines.feed(chunk)
            continue
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is None or st.st_ino != ino:
            log.info("log file %s was rotated; reopening", path)
            f.close()
            f = None
            yield from lines.flush()  # the old file's unterminated last line will never be completed
            continue
        if st.st_size < f.tell():
            log.info("log file %s was truncated; reading from its start", path)
            f.seek(0)
            lines = LineSplitter()
            continue
        stop.wait(poll)
    if f is not None:
        f.close()


def read_stream(stream: BinaryIO, stop: threading.Event) -> Iterator[str]:
    """Lines of a byte stream (stdin), with the same bounded splitter as files: no line is held whole, and bytes
    that are not UTF-8 are replaced rather than killing the reader under a strict locale."""
    lines = LineSplitter()
    read = getattr(stream, "read1", stream.read)
    while not stop.is_set():
        chunk = read(1 << 16)
        if not chunk:
            break
        yield from lines.feed(chunk)
    yield from lines.flush()


def stdin_lines(stop: threading.Event) -> Iterator[str]:
    return read_stream(sys.stdin.buffer, stop)


def retrying(
    make: Callable[[], Iterator[str]],
    stop: threading.Event,
    on_up: OnUp,
    backoff: float = 1.0,
    max_backoff: float = 30.0,
    beat: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Re-open a source that ends or raises (API disconnect), with capped exponential backoff."""
    delay = backoff
    while not stop.is_set():
        why = "log stream ended"
        try:
            on_up(True, "")
            for line in make():
                delay = backoff
                yield line
            log.info("log stream ended; reconnecting")
        except Exception as e:  # the source is outside our control: never let it kill the sidecar
            why = f"log source failed: {one_line(e)}"
            log.warning("%s; retrying in %.0f s", why, delay)
        on_up(False, why)
        if beat:
            beat()
        stop.wait(delay)
        delay = min(max_backoff, delay * 2)
