"""Where the vLLM log comes from: a file (followed across rotation and truncation), stdin, or nothing.
The Kubernetes API source is in k8s_logs.py."""
from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO, TextIO

log = logging.getLogger(__name__)

LineSink = Callable[[str], None]


def follow_file(path: str, stop: threading.Event, poll: float = 0.2, from_start: bool = True,
                on_up: Callable[[bool], None] | None = None) -> Iterator[str]:
    """Yield lines appended to `path`, like `tail -F`: waits for the file to appear, reopens it when it is
    replaced (rotation), and starts over when it shrinks (truncation). A partial last line is held back.

    Read as bytes and decoded a whole line at a time: a writer may flush half a multi-byte character, and a
    text-mode tell() there is a decoder cookie, not a file offset (it looked like a truncation)."""
    f: BinaryIO | None = None
    ino = None
    buf = b""
    while not stop.is_set():
        if f is None:
            try:
                f = open(path, "rb")  # noqa: SIM115
            except OSError:
                if on_up:
                    on_up(False)
                stop.wait(poll)
                continue
            ino = os.fstat(f.fileno()).st_ino
            if not from_start:
                f.seek(0, os.SEEK_END)
            from_start = True  # a rotated-in file is read from its start
            if on_up:
                on_up(True)
        chunk = f.read(1 << 16)
        if chunk:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
            if len(buf) > 1 << 20:  # a 1 MiB line without newline: hand it over rather than grow without bound
                yield buf.decode("utf-8", "replace")
                buf = b""
            continue
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is None or st.st_ino != ino:
            log.info("log file %s was rotated; reopening", path)
            f.close()
            f = None
            if buf:  # the old file's unterminated last line will never be completed
                yield buf.decode("utf-8", "replace")
            buf = b""
            continue
        if st.st_size < f.tell():
            log.info("log file %s was truncated; reading from its start", path)
            f.seek(0)
            buf = b""
            continue
        stop.wait(poll)
    if f is not None:
        f.close()


def read_stream(stream: TextIO, stop: threading.Event) -> Iterator[str]:
    for line in stream:
        if stop.is_set():
            return
        yield line.rstrip("\n")


def stdin_lines(stop: threading.Event) -> Iterator[str]:
    return read_stream(sys.stdin, stop)


def pump(lines: Iterator[str], sink: LineSink) -> None:
    for line in lines:
        sink(line)


def retrying(make: Callable[[], Iterator[str]], stop: threading.Event, on_up: Callable[[bool], None],
             backoff: float = 1.0, max_backoff: float = 30.0) -> Iterator[str]:
    """Re-open a source that ends or raises (API disconnect), with capped exponential backoff."""
    delay = backoff
    while not stop.is_set():
        try:
            on_up(True)
            for line in make():
                delay = backoff
                yield line
            log.info("log stream ended; reconnecting")
        except Exception as e:  # the source is outside our control: never let it kill the sidecar
            log.warning("log source failed: %s; retrying in %.0f s", e, delay)
        on_up(False)
        stop.wait(delay)
        delay = min(max_backoff, delay * 2)
