"""Real Python virtual environments for the tests that exercise `--python` (the image build's path).

`make_venv(dest)` creates a venv without pip at `dest` and returns its interpreter and its purelib directory,
as `sysconfig` inside that venv reports it: the directory the patch tool must find without importing vLLM.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path


def make_venv(dest: Path) -> tuple[Path, Path]:
    """Create a venv (no pip, symlinked interpreter) at `dest`; return its python and its purelib."""
    venv.create(dest, with_pip=False, symlinks=True)
    py = dest / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    return py, purelib
