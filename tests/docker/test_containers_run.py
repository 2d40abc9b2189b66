"""The READMEs' `docker run` lines, executed: each line verbatim with bash, `docker` being podman after the CPU
overlay (tests/support/docker_shim.py: docker/compose.cpu.yaml applied to the command line), on the images the
session built (`built_images`): the vLLM image of the CPU release on its serving stand-in base, the sidecar image.

The vLLM container must answer completions; the sidecar container, following the vLLM container's log on the shared
volume, must say 503 with a reason first and reach /readyz 200 only once its canary passed on that engine."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.images.podman import Podman

from tests.support import threads
from tests.support.http import get
from tests.support.images import CPU_TARGET
from tests.support.repo import markdown_files
from tests.support.vllm_server import free_port

REPO = Path(__file__).resolve().parents[2]
READMES = markdown_files()
DOCKER_README = REPO / "docker" / "README.md"
MODEL = WORK / "models" / "smollm2-135m-instruct"
SERVED = "smollm2-135m-instruct"
# A vLLM start on 2 busy cores took ~1-3 min; this bounds a start that will not come.
START_TIMEOUT = 900

pytestmark = pytest.mark.system


def commands(text: str, inline: bool = True) -> list[str]:
    """The shell commands of a Markdown text: indented code lines (continuations joined) and, with `inline`, inline
    `docker run|compose ...` spans that name more than the command itself, in order."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        code = line[4:] if line.startswith("    ") else None
        if code is not None and code.strip():
            cmd = code.rstrip()
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            out.append(re.sub(r"\s+#.*$", "", cmd).strip())
        elif inline:
            out += [m.strip() for m in re.findall(r"`(docker (?:run|compose) [^`]+)`", line)]
        i += 1
    return out


def readme_docker_runs() -> dict[str, list[str]]:
    return {
        str(p.relative_to(REPO)): [c for c in commands(p.read_text()) if c.startswith("docker run ")] for p in READMES
    }


def block_with(text: str, needle: str) -> list[str]:
    """The commands of the indented code block that contains `needle`."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("    ") or not line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    for block in blocks:
        cmds = commands("\n".join(block), inline=False)
        if any(needle in c for c in cmds):
            return cmds
    raise AssertionError(f"no code block with {needle!r}")


VERSIONS_LINE = "docker run --rm --entrypoint cat vllm-rocm:0.10.2-p3 /opt/vllm-rocm/versions"
SERVE_BLOCK_NEEDLE = "docker run --rm --device /dev/kfd"
SIDECAR_BLOCK_NEEDLE = "docker run -d --name vllm-health"


def test_every_readme_docker_run_line_is_run_here() -> None:
    """A `docker run` line added to a README without a test here fails: every line below is executed."""
    found = {(f, c) for f, cs in readme_docker_runs().items() for c in cs}
    text = DOCKER_README.read_text()
    tested = {("docker/README.md", VERSIONS_LINE)}
    tested |= {("docker/README.md", c) for c in block_with(text, SERVE_BLOCK_NEEDLE) if c.startswith("docker run")}
    tested |= {("docker/README.md", c) for c in block_with(text, SIDECAR_BLOCK_NEEDLE) if c.startswith("docker run")}
    assert found == tested, f"README docker run lines without a test: {found - tested}; gone: {tested - found}"


@pytest.fixture
def docker(podman: Podman, built_images: dict, tmp_path: Path) -> Iterator[dict]:
    """The environment under which `docker` is the shim, the ports it moves, and the record of what it changed."""
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"{MODEL} is missing: run `make setup-vllm` (make test does it)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "docker"
    shim.write_text(
        f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} "
        f'-m tests.support.docker_shim "$@"\n'
    )
    shim.chmod(0o755)
    ports = {"8000": str(free_port()), "9400": str(free_port())}
    record = tmp_path / "shim.jsonl"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SHIM_PODMAN_ENV": json.dumps({k: v for k, v in podman.env.items() if k.startswith("CONTAINERS_")}),
        "SHIM_VLLM_IMAGE": built_images["by_target"][CPU_TARGET]["image"],
        "SHIM_HEALTH_IMAGE": built_images["by_target"]["vllm-rocm-health"]["image"],
        "SHIM_MODEL_DIR": str(MODEL),
        "SHIM_PORTS": ",".join(f"{k}={v}" for k, v in ports.items()),
        "SHIM_RECORD": str(record),
    }
    env.pop("HF_TOKEN", None)
    yield {"env": env, "ports": ports, "record": record, "cwd": tmp_path}
    podman.remove_everything()  # whatever a failed test left running


def sh(docker: dict, line: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], env=docker["env"], cwd=docker["cwd"], capture_output=True, text=True, timeout=timeout
    )


def changes(docker: dict) -> list[dict]:
    path: Path = docker["record"]
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_healthy(port: str, alive: Callable[[], str], what: str) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_TIMEOUT:
        if get(f"http://127.0.0.1:{port}/health", timeout=5)[0] == 200:
            return time.monotonic() - t0
        why = alive()
        if why:
            pytest.fail(f"{what} stopped before it was healthy: {why}")
        time.sleep(1)
    pytest.fail(f"{what}: /health did not answer 200 within {START_TIMEOUT} s")


def complete(port: str) -> dict:
    body = json.dumps(
        {"model": SERVED, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
        return json.loads(r.read())


def test_versions_line(docker: dict) -> None:
    r = sh(docker, VERSIONS_LINE)
    assert r.returncode == 0, r.stdout + r.stderr
    facts = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert facts["patch_series"] == "vllm-0.32.0" and facts["build"] == "prebuilt", facts
    [change] = changes(docker)
    assert change["image"] == ["vllm-rocm:0.10.2-p3", docker["env"]["SHIM_VLLM_IMAGE"]]
    assert change["dropped"] == [] and change["arguments"] is None


def test_serve_line_answers_completions(docker: dict, podman: Podman) -> None:
    """The single `docker run` of the README, in the foreground as a user runs it; Ctrl-C's SIGTERM stops it and
    --rm leaves nothing."""
    [line] = [c for c in block_with(DOCKER_README.read_text(), SERVE_BLOCK_NEEDLE) if c.startswith("docker run")]
    out = open(docker["cwd"] / "serve.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        ["bash", "-c", line],
        env=docker["env"],
        cwd=docker["cwd"],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def alive() -> str:
            if proc.poll() is None:
                return ""
            return f"exit {proc.returncode}:\n{(docker['cwd'] / 'serve.out').read_text(errors='replace')[-3000:]}"

        took = wait_healthy(docker["ports"]["8000"], alive, "the vLLM container")
        answer = complete(docker["ports"]["8000"])
        assert answer["model"] == SERVED and answer["choices"][0]["text"].strip(), answer
        [change] = changes(docker)
        assert sorted(d.split()[0] for d in change["dropped"]) == [
            "--device",
            "--device",
            "--group-add",
            "--group-add",
        ], change
        assert change["ports"] == {"8000": docker["ports"]["8000"]}
        print(
            f"vLLM container healthy after {took:.0f} s; answered {answer['choices'][0]['text']!r}; CPU overlay: "
            f"dropped {change['dropped']}, added {change['added']}"
        )
    finally:
        if proc.poll() is None:  # Ctrl-C: podman passes the signal on to vLLM (--sig-proxy)
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        out.close()
    left = podman("ps", "--all", "--format", "{{.Names}} {{.Image}}").stdout.split("\n")
    assert not [x for x in left if docker["env"]["SHIM_VLLM_IMAGE"] in x], f"--rm left a container: {left}"


def test_sidecar_lines_gate_readiness_on_a_canary_pass(docker: dict, podman: Podman) -> None:
    block = block_with(DOCKER_README.read_text(), SIDECAR_BLOCK_NEEDLE)
    network, vllm_line, sidecar_line, curl_line = block
    assert network.startswith("docker network create") and curl_line.startswith("curl ")
    for line in (network, vllm_line):
        r = sh(docker, line)
        assert r.returncode == 0, f"{line}\n{r.stdout}{r.stderr}"

    def vllm_alive() -> str:
        state = podman.inspect("vllm")["State"]
        return "" if state["Running"] else f"{state}\n{podman('logs', 'vllm', check=False).stdout[-3000:]}"

    took = wait_healthy(docker["ports"]["8000"], vllm_alive, "the vLLM container")
    # The stand-in image's threads (vllm_server.CPU_ENV): no thread of the container's vLLM is bound to one core.
    pid = podman.inspect("vllm")["State"]["Pid"]
    assert any(t.process == "VLLM::Worker" for t in threads.threads(pid)), threads.tree(pid)
    assert not threads.bound(pid), threads.bound(pid)
    # The reference, recorded from this server as the README says (the canary's defaults), but for the timeout: a
    # request of a shape the server has not compiled yet compiles it first, which on a loaded machine takes as long
    # as the start did (the default 60 s ran out beside the node tests, warm run of f16c2f7), as in the compose test.
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "baseline",
            "record",
            "--out",
            "baseline.json",
            "--vllm-url",
            f"http://127.0.0.1:{docker['ports']['8000']}",
            "--timeout",
            str(max(120.0, 2 * took)),
        ],
        cwd=docker["cwd"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    vllm_log = podman("logs", "vllm", check=False).stdout[-5000:] if r.returncode else ""
    assert r.returncode == 0, f"{r.stdout}{r.stderr}\nvLLM container:\n{vllm_log}"
    canary_run = time.monotonic() - t0
    r = sh(docker, sidecar_line)
    assert r.returncode == 0, f"{sidecar_line}\n{r.stdout}{r.stderr}"

    # 503 with a reason until a canary passed on this engine, then 200: never 200 before a pass.
    port = docker["ports"]["9400"]
    seen: list[tuple[int, str]] = []
    deadline = time.monotonic() + 10 * canary_run + 300
    while time.monotonic() < deadline:
        code, body = get(f"http://127.0.0.1:{port}/readyz")
        if code:
            seen.append((code, body.decode(errors="replace")[:200]))
        if code == 200:
            break
        state = podman.inspect("vllm-health")["State"]
        assert state["Running"], f"{state}\n{podman('logs', 'vllm-health', check=False).stderr[-3000:]}"
        time.sleep(0.5)
    else:
        pytest.fail(
            f"/readyz never 200 within {10 * canary_run + 300:.0f} s; seen {seen[-5:]}\n"
            f"{podman('logs', 'vllm-health', check=False).stderr[-3000:]}"
        )
    assert seen[0][0] == 503 and "reason" in seen[0][1], seen[:3]
    _, metrics = get(f"http://127.0.0.1:{port}/metrics")
    passes = sum(
        float(m.group(1))
        for m in re.finditer(r'^vllm_canary_runs_total\{[^}]*outcome="pass"[^}]*\} (\S+)$', metrics.decode(), re.M)
    )
    assert passes >= 1, "Ready without a counted canary pass"
    # The curl line of the README says the same thing.
    r = sh(docker, curl_line.replace("127.0.0.1:9400", f"127.0.0.1:{port}"))
    assert r.returncode == 0 and json.loads(r.stdout)["ready"] is True, r.stdout
    [vllm_change, sidecar_change] = changes(docker)
    assert sidecar_change["dropped"] == [] and sidecar_change["arguments"] is None
    print(f"sidecar: {len(seen)} answers, first {seen[0]}, Ready after a canary pass; baseline took {canary_run:.0f} s")
