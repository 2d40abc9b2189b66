"""hadolint on every Dockerfile (with the repo's pinned .hadolint.yaml), shellcheck and ruff on docker/ scripts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.repo import DOCKER, DOCKERFILES, REPO, tool

LEVELS = ["style", "info", "warning", "error"]  # hadolint's severities, lowest first


def _threshold() -> str:
    import yaml

    cfg = yaml.safe_load((REPO / ".hadolint.yaml").read_text())
    return cfg.get("failure-threshold", "info")


def _hadolint(path: Path) -> list[dict]:
    # Run from the repo root: hadolint reads .hadolint.yaml from the working directory (and -c makes it explicit).
    res = subprocess.run(
        [tool("hadolint"), "-c", ".hadolint.yaml", "-f", "json", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.stdout.strip(), f"hadolint printed nothing: {res.stderr}"
    return json.loads(res.stdout)


def test_every_image_has_a_dockerfile() -> None:
    names = {str(p.relative_to(REPO)) for p in DOCKERFILES}
    assert {"docker/vllm-rocm/Dockerfile", "docker/vllm-rocm/Dockerfile.source", "docker/health/Dockerfile"} <= names


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_hadolint_clean(dockerfile: Path) -> None:
    floor = LEVELS.index(_threshold())
    findings = [f for f in _hadolint(dockerfile) if LEVELS.index(f["level"]) >= floor]
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)


def test_hadolint_config_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    # Guards the guard: with the repo's config, an untagged base and unpinned apt install must be findings.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get update && apt-get install -y curl\n")
    codes = {f["code"] for f in _hadolint(bad)}
    assert {"DL3006", "DL3008", "DL3049"} <= codes, codes


def _scripts() -> list[Path]:
    return sorted(DOCKER.glob("**/*.sh"))


def test_shellcheck_docker_scripts() -> None:
    scripts = _scripts()
    assert scripts, "no shell scripts under docker/"
    res = subprocess.run(
        [tool("shellcheck"), "-x", *map(str, scripts)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_scripts_are_executable() -> None:
    for script in _scripts():
        assert script.stat().st_mode & 0o111, f"{script} is not executable (the Dockerfiles run it directly)"


def test_ruff_docker_python() -> None:
    res = subprocess.run(
        [tool("ruff"), "check", "--output-format", "concise", "docker", "tests/docker"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
