"""vLLM's own log lines, told apart from text that clients wrote.

A vLLM log holds client text: uvicorn's access lines (`"GET /hipError HTTP/1.1" 404`), and with request logging
the prompts and stop strings of every request. Only the start of a line is vLLM's alone, so every event is anchored
there (vLLM 0.10.1.1 `logger.py:24`, 0.14+ `logging_utils/formatter.py`, 0.33 writes the process prefix itself):

    [(<process> pid=<n>) ]<LEVEL> <MM-DD> <HH:MM:SS>[.fff] [<file>.py:<line>] <message>     a logger line
    [(<process> pid=<n>) ]<text>                                                          a raw line

Raw lines are what processes print without the logger: tqdm capture bars (stderr, `\\r` redraws), tracebacks and the
HIP runtime's own messages; uvicorn's access lines are raw too (`INFO:     127.0.0.1:... "GET ..."`), so their client
text is never at the start of a message. Every pattern here is a single anchored match, linear in the line length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]{0,32}[A-Za-z]")
# `(EngineCore_DP0 pid=412) `, `(Worker_TP1 pid=501) `, `(VllmWorker rank=0 pid=7) `, `(APIServer pid=301) `
_PROC = re.compile(r"\((?P<proc>[A-Za-z][A-Za-z0-9_ =.-]{0,63}) pid=(?P<pid>\d{1,10})\) ")
# `INFO 12-02 11:00:00 [core.py:76] `; 0.14+ may print a relative path (`[v1/engine/core.py:98]`) at DEBUG.
_HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})? "
    r"\[(?:[A-Za-z0-9_.-]{1,64}/){0,8}(?P<file>[A-Za-z0-9_.-]{1,64}):\d{1,7}\] "
)


@dataclass(frozen=True)
class LogLine:
    """One physical line, split at the positions vLLM alone controls."""

    proc: str  # process name of the prefix, "" without one
    pid: int | None  # its pid
    level: str  # logger level; "" for a raw line
    source: str  # the logging module's file name (`core.py`); "" for a raw line
    message: str  # the text after the header (logger line) or after the prefix (raw line)

    @property
    def raw(self) -> bool:
        return not self.level


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line) if "\x1b" in line else line


def split(line: str) -> LogLine:
    """`line` without its newline. Colour codes are dropped first (vLLM colours the level)."""
    line = strip_ansi(line).rstrip("\r\n")
    proc, pid, pos = "", None, 0
    m = _PROC.match(line)
    if m:
        proc, pid, pos = m.group("proc"), int(m.group("pid")), m.end()
    h = _HEADER.match(line, pos)
    if h:
        return LogLine(proc, pid, h.group("level"), h.group("file"), line[h.end() :])
    return LogLine(proc, pid, "", "", line[pos:])
