"""The disk a directory tree takes: what the builds and imports size their need against."""

from __future__ import annotations

import os
from pathlib import Path


def tree_bytes(root: Path) -> int:
    """Allocated bytes of the files under `root` (0 if it is absent; a file removed while walked counts nothing)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total
