"""Find the vLLM installation and its release without importing vLLM (that needs torch and a GPU stack)."""

from __future__ import annotations

import ast
import json
import logging
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PatchConflict, TargetNotFound

log = logging.getLogger(__name__)

_PUBLIC_RE = re.compile(r"^\d+(\.\d+)*$")
_SYSCONFIG_CODE = (
    "import json, sysconfig; "
    "print(json.dumps([sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))"
)


@dataclass
class Target:
    root: Path  # the directory holding vllm/ (site-packages or an unpacked wheel root)
    dist_info: Path | None
    version: str  # as found, e.g. "0.10.2+rocm700"
    sources: dict[str, str] = field(default_factory=dict)  # where each version string came from

    @property
    def release(self) -> str:
        """The public release without the local part: `0.10.2+rocm700` -> `0.10.2`."""
        return self.version.split("+", 1)[0]

    @property
    def is_final_release(self) -> bool:
        return bool(_PUBLIC_RE.match(self.release))


def site_packages_of(python: str) -> list[Path]:
    """Ask interpreter `python` for its purelib/platlib (it runs sysconfig only; vLLM is never imported)."""
    try:
        proc = subprocess.run(
            [python, "-I", "-c", _SYSCONFIG_CODE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetNotFound(f"cannot run --python {python}: {exc}") from None
    if proc.returncode != 0:
        raise TargetNotFound(f"--python {python} failed ({proc.returncode}): {proc.stderr.strip()}")
    paths: list[Path] = []
    for p in json.loads(proc.stdout):
        if p and Path(p) not in paths:
            paths.append(Path(p))
    return paths


def resolve_root(target: str | None, python: str | None) -> Path:
    if python:
        candidates = site_packages_of(python)
        for c in candidates:
            if (c / "vllm").is_dir():
                return c
        raise TargetNotFound(
            f"no vllm/ package in the site-packages of {python}: {[str(c) for c in candidates]}"
        )
    if not target:
        raise TargetNotFound("give a TARGET directory or --python PYEXE")
    root = Path(target)
    if not root.is_dir():
        raise TargetNotFound(f"TARGET {root} does not exist or is not a directory")
    if not (root / "vllm").is_dir():
        raise TargetNotFound(
            f"no vllm/ package in {root} (expected a site-packages dir or an unpacked wheel root)"
        )
    return root


def _metadata_field(path: Path, name: str) -> str | None:
    # METADATA is RFC 822: the headers end at the first blank line (the long description follows).
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break
        if line.lower().startswith(name.lower() + ":"):
            return line.split(":", 1)[1].strip()
    return None


def _find_dist_info(root: Path) -> Path | None:
    found = []
    for d in sorted(root.glob("vllm-*.dist-info")):
        meta = d / "METADATA"
        if meta.is_file() and (_metadata_field(meta, "Name") or "").lower() == "vllm":
            found.append(d)
    if len(found) > 1:
        raise PatchConflict(f"{root} holds several vllm dist-info directories: {[d.name for d in found]}")
    return found[0] if found else None


def _version_from_module(path: Path) -> str | None:
    """The string literal assigned to `__version__` or `version` in vllm/_version.py (setuptools-scm)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if (
            names & {"__version__", "version"}
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def detect(root: Path) -> Target:
    """Read the release from dist-info METADATA and vllm/_version.py (or version.py); they must agree."""
    sources: dict[str, str] = {}
    dist_info = _find_dist_info(root)
    if dist_info is not None:
        v = _metadata_field(dist_info / "METADATA", "Version")
        if v:
            sources[f"{dist_info.name}/METADATA"] = v
    for mod in ("vllm/_version.py", "vllm/version.py"):
        v = _version_from_module(root / mod) if (root / mod).is_file() else None
        if v:
            sources[mod] = v
            break
    if not sources:
        raise TargetNotFound(
            f"cannot tell the vLLM release in {root}: no vllm dist-info METADATA and no version in "
            "vllm/_version.py or vllm/version.py"
        )
    versions = set(sources.values())
    if len(versions) > 1:
        raise PatchConflict(
            f"the vLLM release in {root} is ambiguous: "
            + ", ".join(f"{k} says {v}" for k, v in sources.items())
        )
    version = versions.pop()
    log.debug("detected vLLM %s in %s from %s", version, root, sorted(sources))
    return Target(root, dist_info, version, sources)
