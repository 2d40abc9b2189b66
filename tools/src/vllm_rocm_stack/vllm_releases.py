"""Pristine file trees of real vLLM releases, fetched from PyPI once and cached (for the tests; the releases they read
come from the release registry, releases.json).

`release_tree("0.10.2")` returns `<cache>/0.10.2/tree-<hash of the file list>/`, a minimal unpacked-wheel root
holding only the files the patch tool, the image tests and the chart's flag tests read (dist-info METADATA/RECORD,
the version module, every file a patch of the series touches, the argument parser, config and env modules). The
wheel itself (~400 MB) is deleted after extraction. The cache lives in `.work/cache/vllm-releases/` (git-ignored)
unless `VLLM_RELEASES_CACHE` says otherwise. The tree is named for the file list, so a tree made for another list
is never taken for this one.

Safe against concurrent and interrupted runs: one `flock` per version serialises fetchers, extraction goes to
a temporary directory that is renamed into place only when complete, and a finished tree has a marker file.
Callers must treat the tree as read-only and copy it (see `copy_release_tree`) before mutating anything.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import releases
from .config import REPO, WORK

log = logging.getLogger(__name__)

REPO_ROOT = REPO
# The patch tool with the known-issues evaluator it imports, uninstalled, as the image build runs it.
PATCH_TOOL_PYTHONPATH = f"{REPO_ROOT / 'patches' / 'src'}:{REPO_ROOT / 'known-issues' / 'src'}"
DEFAULT_CACHE = WORK / "cache" / "vllm-releases"

_REGISTRY = releases.load()
# Releases the patch series supports (releases.json's rows), and releases it deliberately does not know (for the
# "unknown" tests).
SUPPORTED_VERSIONS: tuple[str, ...] = _REGISTRY.supported
UNKNOWN_VERSIONS: tuple[str, ...] = _REGISTRY.unknown_to_the_series
# Releases whose own argument parser, envs.py and config the chart's guard tests read (tests/charts/test_guard.py):
# every supported and every other checked release of releases.json (0.10.0: no cudagraph_mode yet; 0.30.0: a new
# rule for piecewise modes without VLLM_COMPILE; the newest checked).
GUARD_RELEASES: tuple[str, ...] = _REGISTRY.checked

# Paths inside the wheel, relative to its root. Missing ones are fine (e.g. `_version.py` vs `version.py`).
WANTED_FILES: tuple[str, ...] = (
    "vllm/__init__.py",
    "vllm/_version.py",
    "vllm/version.py",
    "vllm/v1/attention/backends/rocm_aiter_fa.py",
    "vllm/v1/attention/backends/utils.py",
    # What `vllm serve` reads to build its configuration (vllm_rocm_stack/vllm_release_facts.py, for the chart's
    # guard): the engine flags, FlexibleArgumentParser (utils/argparse_utils.py from 0.12, utils/__init__.py before),
    # the `serve` sub-command, the compilation config and VllmConfig (one config.py in 0.10.0, config/__init__.py up
    # to 0.11, config/vllm.py from 0.12), env vars, and the ROCm attention-backend selection with its AITER switches.
    "vllm/engine/arg_utils.py",
    "vllm/utils/__init__.py",
    "vllm/utils/argparse_utils.py",
    "vllm/entrypoints/cli/serve.py",
    "vllm/config.py",
    "vllm/config/__init__.py",
    "vllm/config/compilation.py",
    "vllm/config/vllm.py",
    "vllm/envs.py",
    "vllm/platforms/rocm.py",
    "vllm/_aiter_ops.py",
    "vllm/v1/attention/backends/triton_attn.py",
    "vllm/attention/layer.py",
    "vllm/model_executor/layers/quantization/kv_cache.py",
)
# The front-end flags move between releases (openai/, launchers/, common/): every `cli_args.py` under entrypoints/.
WANTED_PATTERNS: tuple[str, ...] = ("vllm/entrypoints/*cli_args.py",)
_COMPLETE_MARKER = ".complete"
AITER_FA = "vllm/v1/attention/backends/rocm_aiter_fa.py"  # the file the patch series changes


def cache_dir() -> Path:
    return Path(os.environ.get("VLLM_RELEASES_CACHE") or DEFAULT_CACHE)


def _wanted(name: str, version: str) -> bool:
    if name in WANTED_FILES or any(fnmatch.fnmatchcase(name, pat) for pat in WANTED_PATTERNS):
        return True
    dist_info = f"vllm-{version}.dist-info/"
    return name in (dist_info + "METADATA", dist_info + "RECORD", dist_info + "WHEEL")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (made if missing): one fetch of a release at a time, across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _download_wheel(version: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        f"vllm=={version}",
        "-d",
        str(dest),
    ]
    log.info("downloading vllm==%s wheel: %s", version, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download vllm=={version} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    wheels = sorted(dest.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one vllm wheel in {dest}, found {[w.name for w in wheels]}")
    return wheels[0]


def _extract(wheel: Path, version: str, into: Path) -> list[str]:
    extracted: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not _wanted(info.filename, version):
                continue
            target = into / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            extracted.append(info.filename)
    return extracted


def _tree_name() -> str:
    """The tree directory is named for the file list: a cache filled with another list is never taken for this one
    (checkouts with different lists can share one cache)."""
    wanted = "\n".join(sorted({*WANTED_FILES, *WANTED_PATTERNS}))
    return "tree-" + hashlib.sha256(wanted.encode()).hexdigest()[:12]


def release_tree(version: str) -> Path:
    """Return the pristine minimal tree of vLLM `version`, fetching it from PyPI on first use."""
    base = cache_dir() / version
    tree = base / _tree_name()
    if (tree / _COMPLETE_MARKER).is_file():
        return tree
    with locked(cache_dir() / f"{version}.lock"):
        if (tree / _COMPLETE_MARKER).is_file():  # another process finished while we waited
            return tree
        base.mkdir(parents=True, exist_ok=True)
        if tree.exists():  # a partial tree from an interrupted run: never trust it
            shutil.rmtree(tree)
        with tempfile.TemporaryDirectory(dir=base, prefix=".fetch-") as tmp:
            tmp_path = Path(tmp)
            wheel = _download_wheel(version, tmp_path / "wheel")
            staging = tmp_path / "tree"
            names = _extract(wheel, version, staging)
            wheel.unlink()  # the wheel is ~400 MB; only the extracted files are kept
            if f"vllm-{version}.dist-info/METADATA" not in names:
                raise RuntimeError(f"{wheel.name} has no vllm-{version}.dist-info/METADATA")
            (staging / _COMPLETE_MARKER).write_text("\n".join(sorted(names)) + "\n")
            os.replace(staging, tree)
        log.info("vllm %s tree ready at %s", version, tree)
    return tree


def copy_release_tree(version: str, dest: Path) -> Path:
    """Copy the pristine tree of `version` to `dest` (which must not exist) and return `dest`."""
    shutil.copytree(release_tree(version), dest, ignore=shutil.ignore_patterns(_COMPLETE_MARKER))
    return dest


def tree_snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every file under `root`: compare before/after to prove nothing changed."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
    return out


if __name__ == "__main__":  # `python -m vllm_rocm_stack.vllm_releases 0.10.2 ...` warms the cache
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    for v in sys.argv[1:] or sorted({*SUPPORTED_VERSIONS, *UNKNOWN_VERSIONS, *GUARD_RELEASES}):
        print(v, release_tree(v))
