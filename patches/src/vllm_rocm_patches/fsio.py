"""File hashing, the dist-info RECORD, and an all-or-nothing multi-file write."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import WriteError

log = logging.getLogger(__name__)
_TMP_SUFFIX = ".vllm-rocm-patches.tmp"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def record_hash(data: bytes) -> str:
    """The `sha256=<urlsafe b64, no padding>` form wheel RECORD files use."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def updated_record(record_text: str, changes: dict[str, bytes]) -> tuple[str, list[str]]:
    """Return RECORD text with the hash/size of each path in `changes` replaced, and paths it has no line for.

    Only the matching lines are rewritten so every other line stays byte-identical.
    """
    lines = record_text.splitlines(keepends=True)
    missing = set(changes)
    out = []
    for line in lines:
        row = next(csv.reader([line.rstrip("\r\n")]), [])
        if row and row[0] in changes:
            data = changes[row[0]]
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow([row[0], record_hash(data), str(len(data))])
            ending = line[len(line.rstrip("\r\n")) :]
            line = buf.getvalue() + ending
            missing.discard(row[0])
        out.append(line)
    return "".join(out), sorted(missing)


def record_entry(record_text: str, path: str) -> tuple[str, str] | None:
    for row in csv.reader(io.StringIO(record_text)):
        if row and row[0] == path and len(row) >= 3:
            return row[1], row[2]
    return None


def check_writable(path: Path) -> None:
    """Refuse files with no write bit, even as root (root ignores modes and `docker build` runs as root)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise WriteError(f"{path}: file does not exist") from None
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise WriteError(
            f"{path} is read-only (mode {stat.S_IMODE(mode):04o}); refusing to modify it. "
            "Make it writable first (chmod u+w) if patching it is intended."
        )
    if not os.access(path.parent, os.W_OK):
        raise WriteError(f"cannot write in {path.parent} (no write permission); nothing was changed")


@dataclass
class _Staged:
    path: Path
    tmp: Path
    original: bytes
    mode: int


class AtomicWriter:
    """Stage every new file content as a temp file next to its target, then rename all; undo on any failure.

    Each rename is atomic; if a later rename fails, the earlier targets are restored from the original bytes
    (kept in memory: the files are small), so the tree is either fully old or fully new.
    """

    def __init__(self) -> None:
        self._staged: list[_Staged] = []

    def stage(self, path: Path, data: bytes) -> None:
        check_writable(path)
        original = path.read_bytes()
        mode = stat.S_IMODE(path.stat().st_mode)
        tmp = path.with_name(f".{path.name}{_TMP_SUFFIX}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
        except OSError as exc:
            _unlink_quietly(tmp)
            self.abort()
            raise WriteError(f"cannot write {tmp}: {exc}; nothing was changed") from None
        self._staged.append(_Staged(path, tmp, original, mode))

    def abort(self) -> None:
        for s in self._staged:
            _unlink_quietly(s.tmp)
        self._staged.clear()

    def commit(self) -> None:
        done: list[_Staged] = []
        try:
            for s in self._staged:
                os.replace(s.tmp, s.path)
                done.append(s)
        except OSError as exc:
            failed = [s.path for s in self._staged if s not in done]
            self._rollback(done)
            self.abort()
            raise WriteError(f"renaming into {failed[0]} failed: {exc}; all changes were rolled back") from None
        self._staged.clear()

    def _rollback(self, done: list[_Staged]) -> None:
        for s in reversed(done):
            try:
                with open(s.tmp, "wb") as fh:
                    fh.write(s.original)
                os.chmod(s.tmp, s.mode)
                os.replace(s.tmp, s.path)
            except OSError:  # pragma: no cover - nothing more we can do; say so loudly
                log.error("ROLLBACK FAILED for %s: restore it from the wheel", s.path)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
