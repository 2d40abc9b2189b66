"""The CLI as the image build runs it: a subprocess, exit codes, human output, JSON reports, --python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.imports import absolute_imports
from tests.support.venvs import make_venv
from tests.support.vllm_releases import AITER_FA, PATCH_TOOL_PYTHONPATH, REPO_ROOT, tree_snapshot

SRC = REPO_ROOT / "patches" / "src"


def _find_py39() -> str | None:
    """The tool must run on the oldest Python a base image may have: find a working 3.9 (shims may lie)."""
    candidates = [
        shutil.which("python3.9"),
        *sorted(map(str, Path("/root/.pyenv/versions").glob("3.9*/bin/python"))),
    ]
    for c in candidates:
        if not c:
            continue
        try:
            out = subprocess.run(
                [c, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout
        except OSError:
            continue
        if out.strip() == "True":
            return c
    return None


PY39 = _find_py39()


def run(*args: str, python: str = sys.executable, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "VLLM_ROCM_PATCHES_DIR"}
    e["PYTHONPATH"] = PATCH_TOOL_PYTHONPATH  # exactly how the image build runs it (no install)
    e.update(env or {})
    return subprocess.run(
        [python, "-m", "vllm_rocm_patches", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=60,
        check=False,
    )


def test_help_explains_the_commands() -> None:
    r = run("--help")
    assert r.returncode == 0
    for word in ("status", "apply", "verify", "revert", "list", "--python", "--series-dir", "exit codes"):
        assert word in r.stdout


def test_list() -> None:
    r = run("list")
    assert r.returncode == 0
    assert "0001-rocm-aiter-fa-uniform-single-token-decode.patch" in r.stdout
    assert "vllm 0.11.0    aiter-fa-cudagraph-support: fixed upstream" in r.stdout
    assert "vllm 0.33.0    aiter-fa-cudagraph-support: not needed" in r.stdout


def test_apply_report_verify_revert_exit_codes(release_copy, tmp_path: Path) -> None:
    tree = release_copy("0.10.2")
    pristine = tree_snapshot(tree)
    r = run("status", str(tree))
    assert r.returncode == 0 and "applicable" in r.stdout
    assert run("verify", str(tree)).returncode == 1

    report = tmp_path / "out" / "apply.json"
    r = run("apply", str(tree), "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert "applied 3 patch(es)" in r.stdout
    data = json.loads(report.read_text())
    assert data["tool"] == "vllm-rocm-patches" and data["tool_version"]
    assert data["series"]["id"] == "vllm-0.10.2" and len(data["series"]["sha256"]) == 64
    assert data["release"]["version"] == "0.10.2" and data["release"]["known_to_series"]
    first, stacked, other = data["entries"]
    assert [e["state"] for e in data["entries"]] == ["applied"] * 3
    assert [e["action"] for e in data["entries"]] == ["applied"] * 3
    # 0001 and 0002 both change the AITER FA file: before 0001, after 0002
    assert first["files"][AITER_FA]["before"] == first["files"][AITER_FA]["pristine_sha256"]
    assert stacked["files"][AITER_FA]["pristine_sha256"] == first["files"][AITER_FA]["patched_sha256"]
    assert stacked["files"][AITER_FA]["after"] == stacked["files"][AITER_FA]["patched_sha256"]
    assert AITER_FA not in other["files"]
    assert data["known_issues"]["fixed_by_applied_patches"] == [
        "aiter-fa-full-cudagraph-always",
        "aiter-fa-spec-decode-full-decode-graphs",
        "aiter-fa-fp8-kv-cache-fnuz-view",
        "triton-attn-fp8-kv-q-scale-capture",
    ]
    assert data["changed"] is True and data["exit_code"] == 0

    r = run("apply", str(tree))
    assert r.returncode == 0 and "nothing to do" in r.stdout
    vreport = tmp_path / "verify.json"
    assert run("verify", str(tree), "--report", str(vreport)).returncode == 0
    assert json.loads(vreport.read_text())["ok"] is True
    assert run("revert", str(tree)).returncode == 0
    assert tree_snapshot(tree) == pristine


def test_status_json_for_unknown_release(release_copy) -> None:
    tree = release_copy("0.14.0")
    r = run("status", str(tree), "--json")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert data["release"]["known_to_series"] is False and data["series"]["id"] is None
    assert data["entries"][0]["state"] == "fixed-upstream"
    assert data["entries"][0]["message"].startswith(
        "unknown release 0.14.0: file declares UNIFORM_SINGLE_TOKEN_DECODE -> fix present upstream"
    )


def test_conflict_exit_code_1(release_copy) -> None:
    tree = release_copy("0.10.2")
    f = tree / AITER_FA
    f.write_bytes(f.read_bytes() + b"\n")
    r = run("apply", str(tree))
    assert r.returncode == 1
    assert "sha256 mismatch" in r.stdout and AITER_FA in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["status", "/nonexistent/site-packages"], "does not exist"),
        (["status"], "give a TARGET directory or --python"),
        (["apply", str(REPO_ROOT)], "no vllm/ package"),
        (["status", "--python", "/nonexistent/python3"], "cannot run --python"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    r = run(*args)
    assert r.returncode == 2
    assert message in r.stderr


def test_bad_series_dir_exit_2(tmp_path: Path) -> None:
    r = run("--series-dir", str(tmp_path), "list")
    assert r.returncode == 2 and "not a series directory" in r.stderr
    r = run("list", env={"VLLM_ROCM_PATCHES_DIR": str(tmp_path)})
    assert r.returncode == 2 and "not a series directory" in r.stderr


def test_image_build_path_with_python_option(tmp_path: Path, vllm_release) -> None:
    """What the image build runs: `apply --python PY --report R`, then `verify --python PY --report R2`.

    A real venv whose purelib holds the 0.10.1.1 files; importing vllm there would fail (no torch), so this
    also proves vLLM is never imported.
    """
    py, purelib = make_venv(tmp_path / "venv")
    shutil.copytree(vllm_release("0.10.1.1"), purelib, dirs_exist_ok=True)
    report, vreport = tmp_path / "r" / "apply.json", tmp_path / "r" / "verify.json"
    r = run("apply", "--python", str(py), "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert f"at {purelib}" in r.stdout and "applied 3 patch(es)" in r.stdout
    data = json.loads(report.read_text())
    assert data["target"] == str(purelib) and data["series"]["id"] == "vllm-0.10.1.1" and data["ok"]
    assert data["release"]["content_matches"] == ["0.10.1.1 pristine"]  # what apply found before writing
    r = run("verify", "--python", str(py), "--report", str(vreport))
    assert r.returncode == 0, r.stdout
    assert json.loads(vreport.read_text())["summary"] == "verified: every post-condition holds"
    assert run("apply", "--python", str(py)).stdout.count("nothing to do") == 1
    assert run("status", str(purelib), "--python", str(py)).returncode == 2  # both: ambiguous usage


def test_python_without_vllm_is_exit_2(tmp_path: Path) -> None:
    py, _ = make_venv(tmp_path / "venv")
    r = run("apply", "--python", str(py))
    assert r.returncode == 2 and "no vllm/ package on the sys.path" in r.stderr


def test_status_names_the_release_the_files_come_from(release_copy) -> None:
    tree = release_copy("0.10.2")
    r = run("status", str(tree))
    assert "files match: 0.10.2 pristine" in r.stdout
    data = json.loads(run("status", str(tree), "--json").stdout)
    assert data["release"]["content_matches"] == ["0.10.2 pristine"] and data["release"]["tree"] == "installed"


@pytest.mark.skipif(PY39 is None, reason="no Python 3.9 interpreter on this machine")
def test_runs_on_python_3_9_stdlib_only(release_copy) -> None:
    tree = release_copy("0.10.1.1")
    r = run("apply", str(tree), python=PY39, env={"PYTHONNOUSERSITE": "1"})
    assert r.returncode == 0, r.stderr
    assert run("verify", str(tree), python=PY39).returncode == 0


def test_package_imports_only_the_standard_library() -> None:
    """No third-party import may sneak in: the tool runs in bare base images."""
    stdlib = set(sys.stdlib_module_names) if hasattr(sys, "stdlib_module_names") else set()
    assert stdlib, "needs Python >= 3.10 to know the stdlib module names"
    first_party = {"vllm_rocm_known_issues"}  # stdlib-only too: scanned here as well
    for path in [
        *(SRC / "vllm_rocm_patches").glob("*.py"),
        *(REPO_ROOT / "known-issues" / "src" / "vllm_rocm_known_issues").glob("*.py"),
    ]:
        for name in absolute_imports(path):
            assert name.split(".")[0] in stdlib | first_party, f"{path.name} imports {name}"
    assert sysconfig.get_path("purelib")  # the same API the --python probe relies on
