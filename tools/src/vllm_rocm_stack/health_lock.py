"""docker/health/*.lock, the hash-locked requirements of the sidecar image, made from requirements/dev.lock.

Each entry is dev.lock's entry verbatim (version and every hash; its `# via` comments dropped), so the image installs
what the project venv was tested with. requirements.lock holds the dependency closure of pyproject.toml's
`[project].dependencies`, resolved from the installed metadata of the project venv (installed from dev.lock, for the
CPython of the image); build-requirements.lock the build tools of the image's builder stage. `make generate` writes
both (vllm_rocm_stack.generate), tests/docker/test_health_lock.py checks the rule independently.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import re
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import Requirement

from .config import REPO

ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", re.M)
DEV_LOCK = Path("requirements") / "dev.lock"
RUNTIME = Path("docker") / "health" / "requirements.lock"
BUILD = Path("docker") / "health" / "build-requirements.lock"
DOCKERFILE = Path("docker") / "health" / "Dockerfile"
# The builder stage runs `pip wheel --no-build-isolation` with these besides [build-system].requires; the vLLM
# Dockerfiles' tools stage (the same lock) hands the locked pip's wheel to the vLLM stage, which installs the project's
# wheel with it whatever pip the base has.
EXTRA_BUILD_TOOLS = ("wheel", "pip")


class LockError(ValueError):
    """dev.lock, pyproject.toml or the venv cannot give the lock (e.g. the venv is not installed from dev.lock)."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def blocks(text: str, where: Path | str = "") -> dict[str, tuple[str, str, frozenset[str]]]:
    """canonical name -> (the entry's text without comments, version, hash set), in file order."""
    found = {
        canonical(m.group(1)): (m.group(0), m.group(2), frozenset(re.findall(r"sha256:[0-9a-f]{64}", m.group(3))))
        for m in ENTRY.finditer(text)
    }
    pins = re.findall(r"^[A-Za-z0-9][A-Za-z0-9._-]*==", text, re.M)
    if len(pins) != len(found):
        raise LockError(f"{where}: an entry without hashes (pip --require-hashes would refuse it)")
    return found


def entries(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """canonical name -> (version, hash set) of a hash-locked requirements file."""
    return {name: (version, hashes) for name, (_, version, hashes) in blocks(path.read_text(), path).items()}


def closure(roots: list[str], environment: dict[str, str] | None = None) -> set[str]:
    """Canonical names of `roots` and everything they require, from the installed metadata; markers are evaluated
    for `environment` (default: this interpreter), without extras."""
    env = {key: str(value) for key, value in default_environment().items()} | (environment or {}) | {"extra": ""}
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for raw in md.distribution(name).requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return seen


def pyproject(root: Path = REPO) -> dict[str, Any]:
    tomllib = importlib.import_module("tomllib")  # Python 3.11+ (the project venv); mypy checks these roots as 3.10
    data: dict[str, Any] = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def image_environment(root: Path = REPO) -> dict[str, str]:
    """The marker environment of the sidecar image: CPython of its PYTHON_IMAGE default, Linux, amd64 (the bake
    platform), whatever interpreter resolves the lock."""
    m = re.search(r"^ARG PYTHON_IMAGE=python:((\d+\.\d+)\.\d+)", (root / DOCKERFILE).read_text(), re.M)
    if not m:
        raise LockError(f"{root / DOCKERFILE}: no `ARG PYTHON_IMAGE=python:X.Y.Z...` line")
    return {
        "python_version": m.group(2),
        "python_full_version": m.group(1),
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
    }


def _render(root: Path, names: list[str] | set[str], header: list[str]) -> str:
    dev = blocks((root / DEV_LOCK).read_text(), root / DEV_LOCK)
    missing = sorted(set(names) - set(dev))
    if missing:
        raise LockError(f"{missing} not in {DEV_LOCK}: add them to requirements/dev.in and `make lock`")
    return "\n".join([*header, *(dev[name][0] for name in sorted(names))]) + "\n"


def runtime_lock(root: Path = REPO) -> str:
    """docker/health/requirements.lock: the closure of the runtime dependencies, dev.lock's entries."""
    deps = pyproject(root)["project"]["dependencies"]
    image = image_environment(root)
    python = image["python_version"]
    names = closure([Requirement(r).name for r in deps], image)
    dev = blocks((root / DEV_LOCK).read_text(), root / DEV_LOCK)
    for name in sorted(names & set(dev)):
        if md.version(name) != dev[name][1]:
            raise LockError(
                f"the venv has {name} {md.version(name)}, {DEV_LOCK} {dev[name][1]}: "
                "install the venv from dev.lock (`make setup`) first"
            )
    *first, last = [Requirement(r).name for r in deps]
    roots = f"{', '.join(first)} and {last}" if first else last
    return _render(
        root,
        names,
        [
            "# Runtime dependencies of the health sidecar image (docker/health/Dockerfile), installed with",
            "# --require-hashes. GENERATED by `make generate` (vllm_rocm_stack.health_lock) from requirements/dev.lock",
            f"# (same versions, same hashes): the dependency closure of {roots}",
            f"# (pyproject.toml [project].dependencies) for CPython {python} on Linux. After `make lock`, "
            "`make generate`.",
        ],
    )


def build_lock(root: Path = REPO) -> str:
    """docker/health/build-requirements.lock: [build-system].requires, pip wheel's tools and pip, dev.lock's entries."""
    names = {canonical(Requirement(r).name) for r in pyproject(root)["build-system"]["requires"]}
    names |= set(EXTRA_BUILD_TOOLS)
    return _render(
        root,
        names,
        [
            "# Build tools of the project wheel's builder stages (docker/health/Dockerfile; the vLLM Dockerfiles' "
            "tools stage,",
            "# whose vLLM stage installs the wheel with this pip). The wheel is built without isolation, so no "
            "unpinned",
            "# setuptools is fetched. GENERATED by `make generate` (vllm_rocm_stack.health_lock) from "
            "requirements/dev.lock;",
            "# checked by tests/docker.",
        ],
    )
