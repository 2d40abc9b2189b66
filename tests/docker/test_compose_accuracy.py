"""Compose makes the chart's choice: no accuracy reference, no Ready sidecar, and an opt-out that says so.

What the sidecar gets is what a real compose implementation (podman-compose `config`) resolves from compose.yaml and
an overlay; that environment is then handed to the sidecar's own command line (`vllm-rocm-health serve`, in a
subprocess, exactly as the image's entrypoint reads VLLM_HEALTH_*), which refuses to start or starts. A baseline
file is mounted where the overlay says; the test puts a real one there by path rewriting only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.docker.conftest import DOCKER
from tests.docker.test_compose import podman_compose, schema_check
from tests.support.canary import make_baseline
from tests.support.vllm_server import free_port

BASE = DOCKER / "compose.yaml"
BASELINE_OVERLAY = DOCKER / "compose.baseline.yaml"
NO_CANARY = DOCKER / "compose.no-canary.yaml"
ENV = {"RENDER_GID": "109"}


def resolved_health(*overlays: Path, env: dict[str, str] | None = None) -> dict:
    files = [a for f in (BASE, *overlays) for a in ("-f", str(f))]
    res = podman_compose("--dry-run", *files, "config", env={**ENV, **(env or {})})
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)["services"]["health"]


def serve(env: dict[str, str], tmp: Path, mounts: dict[str, Path] | None = None) -> subprocess.CompletedProcess:
    """`vllm-rocm-health serve` with the service's environment (container paths mapped to the test's files), cut
    off after its configuration check: a sidecar that accepts its configuration starts listening, and is stopped."""
    env = dict(env)
    for var, value in list(env.items()):
        for inside, outside in (mounts or {}).items():
            if value == inside:
                env[var] = str(outside)
    (tmp / "vllm.log").touch()
    env.update(
        {
            "VLLM_HEALTH_VLLM_URL": "http://127.0.0.1:9",
            "VLLM_HEALTH_LOG_SOURCE": f"file:{tmp / 'vllm.log'}",
            "VLLM_HEALTH_LISTEN": f"127.0.0.1:{free_port()}",
            "VLLM_HEALTH_MODEL": "m",
        }
    )
    url = f"http://{env['VLLM_HEALTH_LISTEN']}/healthz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_rocm_health", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        cwd=tmp,
    )
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break  # listening: its configuration was accepted
            except httpx.HTTPError:
                time.sleep(0.2)
        rc = proc.poll()
        if rc is None:
            proc.terminate()
    finally:
        out, _ = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, -1 if rc is None else rc, out)  # -1: it was serving


def test_overlays_match_the_compose_spec(tmp_path: Path) -> None:
    for overlay in (BASELINE_OVERLAY, NO_CANARY):
        schema_check(overlay)


def test_compose_alone_gives_the_sidecar_no_reference_and_it_refuses_to_start(tmp_path: Path) -> None:
    env = resolved_health()["environment"]
    assert not {"VLLM_HEALTH_CANARY_BASELINE", "VLLM_HEALTH_QUALIFICATION", "VLLM_HEALTH_CANARY_ENABLED"} & set(env)
    assert env["VLLM_HEALTH_EXPECTED_MODE"] == "FULL_AND_PIECEWISE"  # the mode vLLM is given, as the chart passes it
    res = serve(env, tmp_path)
    assert res.returncode == 2, res.stdout
    for way in ("no accuracy reference", "compose.baseline.yaml", "compose.qualified.yaml", "compose.no-canary.yaml"):
        assert way in res.stdout, res.stdout


def test_the_baseline_overlay_needs_its_file_and_the_sidecar_uses_it(tmp_path: Path) -> None:
    files = ["-f", str(BASE), "-f", str(BASELINE_OVERLAY)]
    missing = podman_compose("--dry-run", *files, "config", env=ENV)
    assert missing.returncode != 0 and "CANARY_BASELINE" in missing.stdout + missing.stderr
    host = tmp_path / "baseline.json"
    make_baseline(model="m", seed=20251202, num_problems=8).save(host)
    health = resolved_health(BASELINE_OVERLAY, env={"CANARY_BASELINE": str(host)})
    inside = health["environment"]["VLLM_HEALTH_CANARY_BASELINE"]
    assert any(str(v).startswith(f"{host}:{inside}") for v in health["volumes"]), health["volumes"]
    assert serve(health["environment"], tmp_path, {inside: host}).returncode == -1
    # A baseline the canary cannot use stops it at start, naming the field.
    host.write_text(json.dumps({**json.loads(host.read_text()), "long_prompts": 0, "long_answers": []}))
    res = serve(health["environment"], tmp_path, {inside: host})
    assert res.returncode not in (0, -1) and "long prompts" in res.stdout, res.stdout


def test_the_opt_out_is_explicit_and_says_wrong_tokens_are_not_caught(tmp_path: Path) -> None:
    env = resolved_health(NO_CANARY)["environment"]
    assert env["VLLM_HEALTH_CANARY_ENABLED"] == "false"
    res = serve(env, tmp_path)
    assert res.returncode == -1
    assert "NOT" in res.stdout and "wrong tokens" in res.stdout.lower(), res.stdout


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_switch_is_an_error_not_off(value: str, tmp_path: Path) -> None:
    """`VLLM_HEALTH_CANARY_ENABLED: ${UNSET:-}` must not switch the canary off."""
    env = resolved_health()["environment"]
    res = serve({**env, "VLLM_HEALTH_CANARY_ENABLED": value}, tmp_path)
    assert res.returncode == 2 and "VLLM_HEALTH_CANARY_ENABLED" in res.stdout and "true or false" in res.stdout
