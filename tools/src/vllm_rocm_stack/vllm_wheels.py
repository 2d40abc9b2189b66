"""The Python files of released vLLM wheels from PyPI, fetched once into a git-ignored cache.

`python_tree("0.17.0")` returns `<cache>/0.17.0/`, holding every `vllm/**/*.py` of that release's wheel and a
`.complete` marker (JSON: the wheel's file name and sha256). The wheel itself (~250-450 MB) is deleted as soon as
the Python files are out: the cache for the 40 releases 0.10.0-0.34.0 is ~1 GB. The cache is
`$VLLM_ROCM_WORK/cache/vllm-py/` unless a caller passes another.

Which wheel: pip's own resolution with explicit tags (CPython 3.11, abi3, x86_64 manylinux 1 to 2_35), so a machine
with an older glibc than a release's wheel (0.20.x is manylinux_2_35) still gets it; the Python files are the same
in every platform wheel of a release. Safe against concurrent and interrupted runs: one flock per release, extraction
into a temporary directory renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .config import WORK
from .vllm_releases import locked

log = logging.getLogger(__name__)

DEFAULT_CACHE = WORK / "cache" / "vllm-py"
MARKER = ".complete"
# Every platform tag a vLLM wheel of 0.10-0.34 was published for on x86_64 (pip does not widen manylinux_2_X
# tags on its own).
PLATFORMS = (
    "manylinux_2_35_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
_FINAL = re.compile(r"^\d+(\.\d+)+$")


class WheelError(RuntimeError):
    """A release's wheel could not be fetched or read."""


def pypi_releases() -> list[str]:
    """Every final vLLM release on the package index, as `pip index versions` lists it (newest first)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "vllm", "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    m = re.search(r"^Available versions:\s*(.+)$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or not m:
        raise WheelError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1000:]}")
    return [v.strip() for v in m.group(1).split(",") if _FINAL.match(v.strip())]


def _download(version: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"]
    cmd += ["--quiet", "--python-version", "3.11", "--implementation", "cp", "--abi", "abi3"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    cmd += [f"vllm=={version}", "-d", str(dest)]
    log.info("downloading vllm==%s", version)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise WheelError(f"pip download vllm=={version} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    wheels = sorted(dest.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise WheelError(f"expected one vllm wheel for {version} in {dest}, found {[w.name for w in wheels]}")
    return wheels[0]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def python_tree(version: str, cache: Path | None = None) -> Path:
    """The directory holding `vllm/**/*.py` of release `version`, fetching the wheel on first use."""
    if not _FINAL.match(version):
        raise WheelError(f"{version!r} is not a final release number")
    root = Path(cache or DEFAULT_CACHE)
    tree = root / version
    if (tree / MARKER).is_file():
        return tree
    with locked(root / f"{version}.lock"):
        if (tree / MARKER).is_file():
            return tree
        if tree.exists():  # a partial tree from an interrupted run: never trust it
            shutil.rmtree(tree)
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=f".fetch-{version}-") as tmp:
            wheel = _download(version, Path(tmp) / "wheel")
            staging = Path(tmp) / "tree"
            count = 0
            try:
                with zipfile.ZipFile(wheel) as zf:
                    for info in zf.infolist():
                        name = info.filename
                        if info.is_dir() or not name.startswith("vllm/") or not name.endswith(".py") or ".." in name:
                            continue
                        target = staging / name
                        target.parent.mkdir(parents=True, exist_ok=True)
                        with zf.open(info) as src, open(target, "wb") as dst:
                            shutil.copyfileobj(src, dst)
                        count += 1
            except zipfile.BadZipFile as exc:
                raise WheelError(f"{wheel.name}: {exc}") from None
            if not (staging / "vllm" / "__init__.py").is_file():
                raise WheelError(f"{wheel.name} has no vllm/__init__.py")
            marker = {"wheel": wheel.name, "sha256": _sha256(wheel), "python_files": count}
            wheel.unlink()  # only the Python files are kept
            (staging / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
            os.replace(staging, tree)
    log.info("vllm %s: %s", version, tree)
    return tree


def provenance(tree: Path) -> dict[str, str]:
    """The wheel file name and sha256 a tree was extracted from."""
    data = json.loads((tree / MARKER).read_text())
    return {"wheel": str(data["wheel"]), "sha256": str(data["sha256"])}
