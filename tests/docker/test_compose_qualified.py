"""docker/compose.qualified.yaml: compose takes a qualification report. Checked without an engine: the overlay
against the Compose Specification, how it merges onto compose.yaml, and its gate command run for real on the
H200 report (the recommended mode goes through, the failed FULL is refused) with the file it writes read by
vLLM's own --config reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vllm_rocm_stack.vllm_server import VLLM_PYTHON

from tests.docker.conftest import DOCKER, REPO
from tests.docker.test_compose import _interpolated, interpolate, podman_compose, schema_check

OVERLAY = DOCKER / "compose.qualified.yaml"
BASE = DOCKER / "compose.yaml"
REPORT = REPO / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"
ENV = {"QUALIFICATION_REPORT": str(REPORT), "VLLM_MODEL": "smollm2-135m-instruct", "RENDER_GID": "109"}


def load(env: dict[str, str]) -> dict:
    return _interpolated(yaml.safe_load(OVERLAY.read_text()), env)  # type: ignore[return-value]


def mounts(service: dict) -> dict[str, str]:
    """container path -> source, for `src:dst[:ro]` entries."""
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}


def test_overlay_matches_the_compose_spec(tmp_path: Path) -> None:
    schema_check(OVERLAY)
    resolved = tmp_path / "compose.qualified.yaml"
    resolved.write_text(interpolate(OVERLAY.read_text(), ENV))
    schema_check(resolved)


def test_the_report_is_required() -> None:
    with pytest.raises(ValueError, match="set QUALIFICATION_REPORT"):
        load({k: v for k, v in ENV.items() if k != "QUALIFICATION_REPORT"})


def test_vllm_and_sidecar_wait_for_the_gate_and_read_what_it_writes() -> None:
    over = load(ENV)["services"]
    base = yaml.safe_load(interpolate(BASE.read_text(), ENV))["services"]
    gate, vllm, health = over["qualification"], over["vllm"], over["health"]
    out_dir = gate["command"][gate["command"].index("--out-dir") + 1]
    assert mounts(gate)[out_dir] == "qualified" and mounts(gate)["/etc/vllm-rocm/qualification.json"] == str(REPORT)
    assert gate["command"][gate["command"].index("--report") + 1] == "/etc/vllm-rocm/qualification.json"
    for svc in (vllm, health):
        assert svc["depends_on"]["qualification"]["condition"] == "service_completed_successfully"
        assert all(v.endswith(":ro") for v in svc["volumes"])
    assert mounts(vllm)[out_dir] == "qualified"
    # The overlay's vLLM command is the base command without its --compilation-config (the command line would
    # override the config file) plus --config (compose replaces a command, not appends).
    flag = base["vllm"]["command"].index("--compilation-config")
    assert vllm["command"][:-2] == base["vllm"]["command"][:flag] + base["vllm"]["command"][flag + 2 :]
    assert vllm["command"][-2:] == ["--config", f"{out_dir}/vllm.yaml"]
    # The sidecar reads the report itself, as the chart's does (its baseline, failed modes, release), and expects
    # the mode the operator named, else (empty) the report's recommendation: the gate's choice.
    env = health["environment"]
    assert mounts(health)[env["VLLM_HEALTH_QUALIFICATION"]] == str(REPORT)
    assert "VLLM_HEALTH_CANARY_BASELINE" not in env
    assert env["VLLM_HEALTH_EXPECTED_MODE"] == ""
    assert (
        load({**ENV, "VLLM_CUDAGRAPH_MODE": "FULL"})["services"]["health"]["environment"]["VLLM_HEALTH_EXPECTED_MODE"]
        == "FULL"
    )
    # The gate checks the model the base file serves.
    served = gate["command"][gate["command"].index("--served-model-name") + 1]
    assert served == base["vllm"]["command"][0]
    assert gate["restart"] == "no" and gate["network_mode"] == "none" and gate["cap_drop"] == ["ALL"]
    assert gate["read_only"] is True


def run_gate(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The gate service's entrypoint + command as compose would run them, container paths mapped to tmp_path."""
    gate = load(env)["services"]["qualification"]
    argv = [*gate["entrypoint"], *gate["command"]]
    argv = [
        str(REPORT)
        if a == "/etc/vllm-rocm/qualification.json"
        else str(tmp_path)
        if a == "/run/vllm-rocm/qualified"
        else a
        for a in argv
    ]
    assert argv[0] == "vllm-rocm-health"
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_health", *argv[1:]], capture_output=True, text=True, timeout=60
    )


def test_gate_passes_the_recommended_mode_and_refuses_the_failed_one(tmp_path: Path) -> None:
    ok = run_gate(tmp_path / "a", ENV)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "a" / "mode").read_text() == "FULL_DECODE_ONLY\n"
    bad = run_gate(tmp_path / "b", {**ENV, "VLLM_CUDAGRAPH_MODE": "FULL"})
    assert bad.returncode == 1 and "FULL failed qualification" in bad.stderr
    other = run_gate(tmp_path / "c", {**ENV, "VLLM_MODEL": "Qwen/Qwen3-0.6B"})
    assert other.returncode == 1 and "qualify this model" in other.stderr


def test_vllm_reads_the_mode_from_the_gates_config_file(tmp_path: Path) -> None:
    """vLLM's own --config reader (the CPU build's, 0.32) turns the file into the flag the gate meant."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} is missing: run `make setup-vllm` (make test does it)")
    assert run_gate(tmp_path, ENV).returncode == 0
    code = (
        "import json, sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
        "print(json.dumps(FlexibleArgumentParser().load_config_file(sys.argv[1])))"
    )
    res = subprocess.run(
        [str(VLLM_PYTHON), "-c", code, str(tmp_path / "vllm.yaml")], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    flags = json.loads(res.stdout.strip().splitlines()[-1])
    assert flags[0] == "--compilation-config" and json.loads(flags[1]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}


def test_podman_compose_merges_the_overlay_onto_compose() -> None:
    """A real compose implementation (podman-compose, config mode) resolves base + overlay: the gate service is
    there and vLLM and the sidecar wait for it."""
    res = podman_compose("--dry-run", "-f", str(BASE), "-f", str(OVERLAY), "config", env=ENV)
    assert res.returncode == 0, res.stderr
    services = yaml.safe_load(res.stdout)["services"]
    ours = load(ENV)["services"]
    gate = next(name for name in ours if name not in ("vllm", "health"))
    assert gate in services
    for name in ("vllm", "health"):
        assert gate in str(services[name].get("depends_on", "")), (name, services[name].get("depends_on"))
