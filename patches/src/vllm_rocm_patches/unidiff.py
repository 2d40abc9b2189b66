"""A strict unified-diff parser and applier: no fuzz, no offset, context must match byte for byte.

GNU patch would happily apply a hunk a few lines away or with fuzz; for a pinned release that would hide a
wrong target. Here every hunk must match at exactly the line number it names, and the whole file is
produced in memory so the caller can write it atomically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import PatchConflict, SeriesError

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_EOL = "\\ No newline at end of file"


@dataclass
class Hunk:
    old_start: int
    new_start: int
    # (tag, text) with tag in " -+"; text keeps its line ending ('' when "\ No newline" followed).
    lines: list[tuple[str, str]] = field(default_factory=list)

    def old_lines(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " -"]

    def new_lines(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " +"]

    def reversed(self) -> Hunk:
        swap = {" ": " ", "-": "+", "+": "-"}
        return Hunk(self.new_start, self.old_start, [(swap[tag], t) for tag, t in self.lines])


@dataclass
class FilePatch:
    old_path: str
    new_path: str
    hunks: list[Hunk]

    @property
    def path(self) -> str:
        """Path relative to the target root (the `-p1` convention: strip `a/` / `b/`)."""
        return _strip_prefix(self.new_path if self.new_path != "/dev/null" else self.old_path)

    def reversed(self) -> FilePatch:
        return FilePatch(self.new_path, self.old_path, [h.reversed() for h in self.hunks])


def _strip_prefix(path: str) -> str:
    path = path.split("\t", 1)[0]
    if "/" not in path:
        raise SeriesError(f"patch path {path!r} has no a/ or b/ prefix (-p1 expected)")
    stripped = path.split("/", 1)[1]
    if stripped.startswith("/") or ".." in stripped.split("/"):
        raise SeriesError(f"patch path {path!r} escapes the target root")
    return stripped


def parse(text: str, source: str = "<patch>") -> list[FilePatch]:
    """Parse the diff part of `text`; what precedes the first `--- `/`+++ ` pair (DEP-3 header) is skipped."""
    lines = text.splitlines(keepends=True)
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_path = lines[i][4:].rstrip("\r\n")
            new_path = lines[i + 1][4:].rstrip("\r\n")
            i += 2
            for p in (old_path, new_path):  # validate -p1 paths now, before anything relies on them
                if p != "/dev/null":
                    _strip_prefix(p)
            hunks: list[Hunk] = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _parse_hunk(lines, i, source)
                hunks.append(hunk)
            if not hunks:
                raise SeriesError(f"{source}: file {new_path!r} has no hunks")
            patches.append(FilePatch(old_path, new_path, hunks))
        else:
            i += 1
    if not patches:
        raise SeriesError(f"{source}: no unified diff found")
    return patches


def _parse_hunk(lines: list[str], i: int, source: str) -> tuple[Hunk, int]:
    m = _HUNK_RE.match(lines[i])
    if not m:
        raise SeriesError(f"{source}:{i + 1}: malformed hunk header {lines[i]!r}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    hunk = Hunk(old_start, new_start)
    i += 1
    seen_old = seen_new = 0
    while seen_old < old_len or seen_new < new_len:
        if i >= len(lines):
            raise SeriesError(f"{source}: hunk at line {old_start} is truncated")
        line = lines[i]
        tag, body = line[:1], line[1:]
        if line.rstrip("\r\n") == "":  # some editors strip the lone space of an empty context line
            tag, body = " ", line
        if tag not in " -+":
            raise SeriesError(f"{source}:{i + 1}: unexpected line in hunk: {line!r}")
        hunk.lines.append((tag, body))
        seen_old += tag in " -"
        seen_new += tag in " +"
        i += 1
        if i < len(lines) and lines[i].rstrip("\r\n") == _NO_EOL:
            t, b = hunk.lines[-1]
            hunk.lines[-1] = (t, b.rstrip("\r\n"))
            i += 1
    if seen_old != old_len or seen_new != new_len:
        raise SeriesError(f"{source}: hunk at line {old_start} does not match its header counts")
    return hunk, i


def apply_to_text(content: str, fp: FilePatch) -> str:
    """Return `content` with `fp` applied; raise PatchConflict naming the first hunk that does not match."""
    src = content.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # index into src of the next line not yet copied
    for n, hunk in enumerate(fp.hunks, 1):
        old = hunk.old_lines()
        # A hunk with no old lines (pure addition) names the line *after* which it inserts.
        start = hunk.old_start - 1 if old else hunk.old_start
        if start < pos:
            raise PatchConflict(f"{fp.path}: hunk #{n} overlaps the previous hunk")
        if src[start : start + len(old)] != old:
            found = "".join(src[start : start + len(old)])
            raise PatchConflict(
                f"{fp.path}: hunk #{n} does not match at line {hunk.old_start} (exact match required).\n"
                f"expected:\n{''.join(old)}found:\n{found}"
            )
        out.extend(src[pos:start])
        out.extend(hunk.new_lines())
        pos = start + len(old)
    out.extend(src[pos:])
    return "".join(out)


def applies(content: str, fp: FilePatch) -> bool:
    try:
        apply_to_text(content, fp)
    except PatchConflict:
        return False
    return True
