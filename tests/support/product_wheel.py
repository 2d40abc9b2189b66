"""The product wheel as the sidecar image builds it, installed the way an operator installs it: into a fresh venv in a
temporary directory outside the checkout, used from a directory outside the checkout.

`build(dest)` copies exactly what docker/health/Dockerfile's build stage COPYs (read from the Dockerfile, so the two
cannot drift; the vLLM Dockerfiles' tools stage copies the same, so their `vllm-rocm` is this wheel too) and runs the
same `pip wheel --no-deps --no-build-isolation`. `install(wheel, dest)` makes a venv without pip, installs the wheel
with the project venv's pip (`--no-deps --no-index`: offline) and gives it the locked third-party dependencies
(requirements/dev.lock, already installed in the project venv) through a `.pth` line naming the project venv's
site-packages: that directory's own `.pth` files (the project's editable install) are not processed from there, so the
product's modules can only come from the wheel (`Install.origin` checks it)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "health" / "Dockerfile"
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
# What the commands must never see: the checkout on the path, or a data path from the developer's environment.
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
SCRUBBED_PREFIXES = ("VLLM_ROCM_", "VLLM_HEALTH_")


def build_stage_sources(dockerfile: Path = DOCKERFILE) -> list[str]:
    """The repository paths the first stage of `dockerfile` COPYs to build the wheel (the locks excepted: they are
    the image's pinned dependencies, not part of the wheel): the sidecar image's build stage, or the vLLM
    Dockerfiles' tools stage (tests/docker/test_dockerfiles.py holds the two lists equal)."""
    # fileobj: given a path, dockerfile-parse treats a name other than "Dockerfile" as a directory
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()))
    sources: list[str] = []
    stage = -1
    for ins in parser.structure:
        if ins["instruction"] == "FROM":
            stage += 1
        if stage != 0 or ins["instruction"] != "COPY" or ins["value"].startswith("--from"):
            continue
        *srcs, dest = ins["value"].split()
        for src in srcs:
            if src.endswith(".lock"):
                continue
            # The build mirrors the repository's layout (pyproject.toml's package-dir and package-data name it).
            assert dest.rstrip("/") in (src.rstrip("/"), str(Path(src).parent), "."), ins["value"]
            sources.append(src.rstrip("/"))
    return sources


def build(dest: Path) -> Path:
    """Build the wheel from a copy of what the image copies (setuptools writes build/ and *.egg-info into its
    source) and return its path."""
    src = dest / "src"
    for rel in build_stage_sources():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / rel).is_dir():
            shutil.copytree(REPO / rel, target, ignore=IGNORE)
        else:
            shutil.copy2(REPO / rel, target)
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir"]
    res = subprocess.run([*cmd, str(dest), str(src)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = dest.glob("vllm_rocm_dist-*.whl")
    return wheel


@dataclass(frozen=True)
class Install:
    venv: Path
    cwd: Path  # an empty directory outside the checkout: where the commands run

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)}
        env["PATH"] = f"{self.bin}:/usr/bin:/bin"
        env["HOME"] = str(self.cwd)
        env.update(extra)
        return env

    def run(self, *argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """One of the installed commands (`argv[0]` from the venv's bin/), from `cwd`."""
        return subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            cwd=self.cwd,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def origin(self, module: str) -> Path:
        res = self.run("python", "-c", f"import {module}; print({module}.__file__)")
        assert res.returncode == 0, res.stderr
        return Path(res.stdout.strip())


def install(wheel: Path, dest: Path) -> Install:
    venv = dest / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index"]
        + ["--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "zz-locked-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    cwd = dest / "cwd"
    cwd.mkdir()
    return Install(venv, cwd)
