"""Compose files as compose reads them: ${VAR} interpolation, the Compose Specification's JSON schema
(check-jsonschema's vendored copy) and a real compose implementation (podman-compose, pinned in the lock)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.support.repo import tool

INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${V}, ${V:-default} and ${V:?error} (an unset required variable is compose's error)."""

    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if env.get(name):
            return env[name]
        if op.endswith("?"):
            raise ValueError(f"{name}: {arg}")
        return arg

    return INTERP.sub(one, text)


def interpolated(node: object, env: dict[str, str]) -> object:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolated(x, env) for x in node]
    if isinstance(node, dict):
        return {k: interpolated(v, env) for k, v in node.items()}
    return node


def schema_check(path: Path) -> None:
    res = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def podman_compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("podman-compose"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ["PATH"], **(env or {})},
    )
