"""docker/health/*.lock: subsets of requirements/dev.lock for the sidecar image (written by `make generate`:
vllm_rocm_stack.health_lock, whose parsing and closure these tests use).

Each pinned entry must be byte-for-byte the same version and hash set as in requirements/dev.lock, and the
runtime lock must be exactly the dependency closure of the project's runtime dependencies (pyproject.toml),
resolved from the installed metadata of the project venv (which was installed from dev.lock)."""

from __future__ import annotations

import importlib.metadata as md

import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from vllm_rocm_stack.health_lock import canonical, closure, entries

from tests.support.repo import DOCKER, REPO

RUNTIME = DOCKER / "health" / "requirements.lock"
BUILD = DOCKER / "health" / "build-requirements.lock"


def test_locked_entries_are_copies_of_dev_lock() -> None:
    dev = entries(REPO / "requirements" / "dev.lock")
    for path in (RUNTIME, BUILD):
        locked = entries(path)
        assert locked, f"{path} pins nothing"
        for name, (version, hashes) in locked.items():
            assert name in dev, f"{path}: {name} is not in requirements/dev.lock"
            assert (version, hashes) == dev[name], f"{path}: {name} differs from requirements/dev.lock"


def test_runtime_lock_is_the_closure_of_the_project_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    roots = [Requirement(r).name for r in project["dependencies"]]
    locked = entries(RUNTIME)
    for name, (version, _hashes) in locked.items():
        assert md.version(name) == version, f"the venv has {name} {md.version(name)}, the lock {version}"
    assert set(locked) == closure(roots)
    for raw in project["dependencies"]:  # and every locked root satisfies pyproject's bound
        req = Requirement(raw)
        assert SpecifierSet(str(req.specifier)).contains(locked[canonical(req.name)][0])


def test_build_lock_satisfies_the_build_system() -> None:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    locked = entries(BUILD)
    for raw in requires:
        req = Requirement(raw)
        assert canonical(req.name) in locked and req.specifier.contains(locked[canonical(req.name)][0])
