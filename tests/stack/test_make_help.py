"""First contact: `make run RUN_ARGS=--help` and `make bench BENCH_ARGS=--help` answer at once, installing nothing,
and say how they are invoked and what the defaults are; `make help` lists every target."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_rocm_stack.vllm_server import CPU_ENV, KV_CACHE_BYTES

REPO = Path(__file__).resolve().parents[2]


def make(*args: str, work: Path) -> subprocess.CompletedProcess[str]:
    # WORK points at a directory that does not exist: any setup step would create it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args, f"WORK={work}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize(
    "target,var,expect",
    [
        ("run", "RUN_ARGS", ['usage: make run RUN_ARGS="[options]"', "--canary-interval", "(default: 60)"]),
        (
            "bench",
            "BENCH_ARGS",
            ['usage: make bench BENCH_ARGS="[options]"', "--no-live", "(default: 2000000)", "(default: 16)"],
        ),
        ("qualify", "QUALIFY_ARGS", ["usage: vllm-rocm qualify run", "--modes"]),
    ],
)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_without_setup(target: str, var: str, expect: list[str], flag: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    dry = make("-n", target, f"{var}={flag}", work=work)
    assert dry.returncode == 0 and "bootstrap.sh" not in dry.stdout and "setup-vllm" not in dry.stdout, dry.stdout
    res = make(target, f"{var}={flag}", work=work)
    assert res.returncode == 0, res.stderr
    for text in expect:
        assert text in res.stdout, (text, res.stdout)
    assert not work.exists(), "printing the help installed something"


def test_without_help_the_targets_still_set_up_first(tmp_path: Path) -> None:
    for target, var in (("run", "RUN_ARGS"), ("bench", "BENCH_ARGS")):
        dry = make("-n", target, f"{var}=--no-live", work=tmp_path / "work")
        assert "bootstrap.sh" in dry.stdout and "setup-vllm-cpu.sh" in dry.stdout, dry.stdout


def test_make_help_lists_the_targets(tmp_path: Path) -> None:
    out = make("help", work=tmp_path / "work").stdout
    for target in (
        "run",
        "test",
        "bench",
        "patches-status",
        "dashboard",
        "generate",
        "check",
        "new-release",
        "setup",
        "clean",
    ):
        assert f"  {target} " in out, out


def test_make_lint_runs_the_linters_and_builds_no_image(tmp_path: Path) -> None:
    # `make lint` is lint only: the pytest run it makes has the linters' tests and none that asks for the image
    # builds (tests/docker's built_images fixture). --setup-plan lists each test's fixtures without running any.
    dry = make("-n", "lint", work=tmp_path / "work")
    command = next(line for line in dry.stdout.splitlines() if " -m pytest " in line)
    paths = [a for a in command.split(" -m pytest ", 1)[1].split() if not a.startswith("-")]
    plan = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--setup-plan", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "built_images" not in plan.stdout, plan.stdout
    for test in ("test_ruff", "test_mypy", "test_shellcheck_tool_scripts", "test_hadolint_clean"):
        assert f"::{test}" in plan.stdout, (test, plan.stdout)


def test_patches_status_needs_a_target_and_runs_without_the_venv(tmp_path: Path) -> None:
    res = make("patches-status", work=tmp_path / "work")
    assert res.returncode != 0 and "usage: make patches-status TARGET=" in res.stderr
    res = make("patches-status", f"TARGET={tmp_path}", work=tmp_path / "work")
    assert res.returncode != 0 and "no vllm/ package" in res.stderr  # the tool itself answered
    assert not (tmp_path / "work").exists()


def test_work_reaches_every_tool_as_one_absolute_path(tmp_path: Path) -> None:
    """`make ... WORK=DIR` moves every generated file: the Makefile exports it as VLLM_ROCM_WORK (absolute, so a tool
    that changes directory still finds it), the venv's bin leads PATH, and the Python tools and shell setup read it."""
    show = 'show-work: ; @echo "$$VLLM_ROCM_WORK $${PATH%%:*}"'
    res = subprocess.run(
        ["make", "--no-print-directory", "--eval", show, "show-work", "WORK=rel/w"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(REPO / "rel" / "w"), str(REPO / "rel" / "w" / "venv" / "bin")]
    env = {**os.environ, "VLLM_ROCM_WORK": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-c", "from vllm_rocm_stack.config import WORK; print(WORK)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.stdout.strip() == str(tmp_path)
    for script in ("tools/bootstrap.sh", "tools/setup-vllm-cpu.sh"):
        assert "WORK=${VLLM_ROCM_WORK:-" in (REPO / script).read_text(), script


def test_make_qualify_gives_its_servers_the_cpu_builds_settings(tmp_path: Path) -> None:
    """`make qualify` passes each server the CPU build's settings from their one place (vllm_server.qualify_args), not
    a copy of them that can fall behind (it lacked VLLM_USE_AOT_COMPILE=0 when that was added)."""
    dry = make("-n", "qualify", work=tmp_path / "work")
    assert dry.returncode == 0, dry.stderr
    [line] = [x for x in dry.stdout.splitlines() if "vllm_rocm_qualify run" in x]
    for k, v in CPU_ENV.items():
        assert f"--env {k}={v}" in line, line
    assert f"--kv-cache-bytes {KV_CACHE_BYTES}" in line, line
    # Where they cannot be read, make qualify stops instead of running qualify without them.
    broken = make("-n", "qualify", "HELP_PY=false", work=tmp_path / "work")
    assert broken.returncode != 0 and "vllm_rocm_qualify run" not in broken.stdout, broken.stdout
    assert "the CPU build's settings for qualify" in broken.stderr, broken.stderr
