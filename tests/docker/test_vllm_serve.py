"""docker/scripts/vllm-serve.sh, the vLLM image's entrypoint: `vllm serve ARGS`, log teed to VLLM_LOG_FILE."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.support.repo import DOCKER

SCRIPT = DOCKER / "scripts" / "vllm-serve.sh"


def fake_vllm(tmp_path: Path, code: int) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\necho "out: $*"\necho "err line" >&2\nexit {code}\n')
    exe.chmod(0o755)
    return exe


def run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    return subprocess.run([str(SCRIPT), *args], env={**base, **env}, capture_output=True, text=True, timeout=30)


def wait_for(path: Path, text: str, timeout: float = 5.0) -> str:
    # tee runs in a process substitution and may flush just after vLLM has exited
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text():
            return path.read_text()
        time.sleep(0.02)
    return path.read_text() if path.is_file() else ""


def test_runs_vllm_serve_and_keeps_its_exit_code(tmp_path: Path) -> None:
    fake_vllm(tmp_path, 3)
    res = run(tmp_path, {}, "--model", "m", "--port", "8000")
    assert res.returncode == 3
    assert res.stdout.strip() == "out: serve --model m --port 8000"
    assert "err line" in res.stderr


def test_tees_stdout_and_stderr_to_the_log_file(tmp_path: Path) -> None:
    fake_vllm(tmp_path, 0)
    log = tmp_path / "logs" / "sub" / "vllm.log"  # the directory is created
    res = run(tmp_path, {"VLLM_LOG_FILE": str(log)}, "m")
    assert res.returncode == 0
    text = wait_for(log, "err line")
    assert "out: serve m" in text and "err line" in text
    assert "out: serve m" in res.stdout  # still on the container's stdout for `docker logs`


def test_appends_across_restarts(tmp_path: Path) -> None:
    fake_vllm(tmp_path, 0)
    log = tmp_path / "vllm.log"
    log.write_text("previous run\n")
    run(tmp_path, {"VLLM_LOG_FILE": str(log)}, "again")
    text = wait_for(log, "out: serve again")
    assert text.startswith("previous run\n") and "out: serve again" in text


def test_unwritable_log_file_fails_fast(tmp_path: Path) -> None:
    fake_vllm(tmp_path, 0)
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = run(tmp_path, {"VLLM_LOG_FILE": str(blocker / "vllm.log")}, "m")
    assert res.returncode != 0
    assert "out: serve" not in res.stdout


def test_image_writes_the_facts_line_before_vllm(tmp_path: Path) -> None:
    """In the image (a versions file exists) the entrypoint prints the facts vLLM never logs, ahead of vLLM's
    output: the applied patch ids, the issues they fix, the ROCm version, the VLLM_ROCM_* switches. The
    sidecar's parser reads exactly this line (tests/health/test_sidecar_known_issues.py)."""
    import json

    fake_vllm(tmp_path, 0)
    versions = tmp_path / "versions"
    versions.write_text(
        "vllm_release=0.10.2\npatch_series=vllm-0.10.2\npatches=0001-a.patch,0002-b.patch\n"
        "fixes_issues=aiter-fa-full-cudagraph-always\n"
    )
    log = tmp_path / "vllm.log"
    env = {
        "VLLM_IMAGE_VERSIONS_FILE": str(versions),
        "VLLM_LOG_FILE": str(log),
        "VLLM_ROCM_USE_AITER": "1",
        "OTHER": "x",
        "VLLM_API_KEY": "secret",
        "VLLM_USE_BREAKABLE_CUDAGRAPH": "1",
    }
    res = run(tmp_path, env, "m")
    assert res.returncode == 0, res.stderr
    first, second = res.stdout.splitlines()[:2]
    assert first.startswith("vllm-rocm facts: ") and second == "out: serve m"
    facts = json.loads(first.split(": ", 1)[1])
    assert facts["patches"] == ["vllm-0.10.2/0001-a.patch", "vllm-0.10.2/0002-b.patch"]
    assert facts["fixes_issues"] == ["aiter-fa-full-cudagraph-always"]
    # the switches the known-issues data conditions on (its switch_defaults), never any other variable
    assert facts["env"] == {"VLLM_ROCM_USE_AITER": "1", "VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}
    assert first in wait_for(log, "out: serve m")  # in the log file the sidecar follows, too


def test_a_broken_versions_file_never_keeps_vllm_from_starting(tmp_path: Path) -> None:
    fake_vllm(tmp_path, 0)
    versions = tmp_path / "versions"
    versions.mkdir()  # unreadable as a file
    res = run(tmp_path, {"VLLM_IMAGE_VERSIONS_FILE": str(versions)}, "m")
    assert res.returncode == 0 and "out: serve m" in res.stdout
