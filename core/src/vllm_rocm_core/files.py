"""Files that another process may read at any moment (a report the sidecar loads, a baseline, a container
runtime's config): written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, *, mode: int = 0o644, unchanged_stays: bool = False) -> None:
    """Replace `path` with `text` in one rename, so a reader sees the old file or the new one, never a part.

    The temp file has a name of its own beside `path` (two writers at once never share one, as a fixed `.tmp` would
    make them); a failed write or rename leaves the old file and no temp file. With `unchanged_stays`, a file
    that already holds `text` is not touched (its inode and mtime stay: a reader watching it sees no change)."""
    if unchanged_stays:
        try:
            if path.read_text() == text:
                return
        except (FileNotFoundError, UnicodeDecodeError):
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
