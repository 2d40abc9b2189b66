"""docker/compose.yaml, docker/prometheus/prometheus.yml and the alertmanager service, checked without an engine.

The compose file is validated against the Compose Specification JSON schema (vendored by check-jsonschema),
raw and after interpolating its ${VAR:-default}s the way compose does, and read by a real compose
implementation, podman-compose (PyPI, pinned in the lock): `config` must resolve it to what these tests read,
and `up --dry-run` must turn it into the container commands a ROCm node needs. No engine runs here, so no
container is started; Docker's own compose (a Go plugin) is not installable from the registries reached here.
The Prometheus config is checked with promtool against the real rules; the Alertmanager routing itself is checked with
amtool and a real Alertmanager in tests/charts/test_alertmanager_routing.py."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from vllm_rocm_stack.config import pinned_versions
from vllm_rocm_stack.vllm_server import CPU_ARGS

from tests.support import docker_shim
from tests.support.compose import interpolate, interpolated, podman_compose, schema_check
from tests.support.repo import DOCKER, REPO, tool

COMPOSE = DOCKER / "compose.yaml"
PROMETHEUS = DOCKER / "prometheus" / "prometheus.yml"
ALERTMANAGER = DOCKER / "alertmanager" / "alertmanager.yml"
RULES = REPO / "charts" / "vllm-rocm" / "files" / "alerts.rules.yaml"


def load(env: dict[str, str] | None = None) -> dict:
    """As compose reads it: YAML first, then ${VAR} in string values (a substituted value stays a string)."""
    return interpolated(yaml.safe_load(COMPOSE.read_text()), env or {})  # type: ignore[return-value]


def test_compose_matches_the_compose_spec(tmp_path: Path) -> None:
    schema_check(COMPOSE)
    resolved = tmp_path / "compose.yaml"
    resolved.write_text(interpolate(COMPOSE.read_text(), {"RENDER_GID": "109"}))
    schema_check(resolved)


def test_schema_check_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text("services:\n  vllm:\n    image: x\n    ports: 8000\n    devices: {kfd: 1}\n")
    with pytest.raises(AssertionError):
        schema_check(broken)


def test_vllm_service_has_the_rocm_device_setup() -> None:
    vllm = load()["services"]["vllm"]
    assert {"/dev/kfd", "/dev/dri"} <= set(vllm["devices"])
    assert len(vllm["group_add"]) == 2  # video + render, by host GID
    assert vllm["ipc"] == "host"
    assert "shm_size" in vllm
    assert "seccomp=unconfined" in vllm["security_opt"]
    assert "cap_add" not in vllm, "SYS_PTRACE only when a debugger must attach (see the comment)"
    assert "seccomp" in COMPOSE.read_text().split("security_opt")[0][-800:], "the seccomp choice is explained"
    assert vllm["healthcheck"]["test"][0] == "CMD" and "/health" in " ".join(vllm["healthcheck"]["test"])


def test_sidecar_reads_the_log_vllm_writes() -> None:
    services = load()["services"]
    vllm, health = services["vllm"], services["health"]
    log_file = vllm["environment"]["VLLM_LOG_FILE"]
    assert health["environment"]["VLLM_HEALTH_LOG_SOURCE"] == f"file:{log_file}"
    log_dir = str(Path(log_file).parent)
    vllm_mounts = {v.split(":")[1]: v.split(":")[0] for v in vllm["volumes"]}
    health_mounts = {v.split(":")[1]: v.split(":")[0] for v in health["volumes"]}
    assert vllm_mounts[log_dir] == health_mounts[log_dir], "both must mount the same volume at the log dir"
    assert any(v.endswith(":ro") for v in health["volumes"] if f":{log_dir}" in v)
    assert health["environment"]["VLLM_HEALTH_VLLM_URL"] == "http://vllm:8000"
    assert health["depends_on"]["vllm"]["condition"] == "service_started"
    assert any(p.endswith(":9400") for p in health["ports"])


def test_the_cpu_overlay_sizes_vllm_as_the_local_servers() -> None:
    """The CPU overlay's vLLM (compose, and every `docker run` line through the shim) gets the KV cache the local
    servers get: several run side by side in the tests, and the default would size itself from the machine."""
    cpu = docker_shim.overlay()
    command = [str(a) for a in cpu["command"]]
    i = command.index(CPU_ARGS[0])
    assert command[i : i + len(CPU_ARGS)] == CPU_ARGS, command
    assert "VLLM_CPU_KVCACHE_SPACE" not in cpu["environment"]  # the legacy setting would size it in GiB


def test_the_compile_cache_is_a_volume_laid_out_as_the_charts() -> None:
    """torch.compile's caches outlive the container, where the chart's compileCache puts them: a named volume at its
    mountPath, VLLM_CACHE_ROOT and TORCHINDUCTOR_CACHE_DIR under it; the image makes that directory its user's, so a
    new volume is writable by uid 2000 under docker too (docker gives a new volume the owner of the image's
    directory, podman the container's user)."""
    chart = yaml.safe_load((REPO / "charts" / "vllm-rocm" / "values.yaml").read_text())["compileCache"]
    compose = load()
    vllm = compose["services"]["vllm"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in vllm["volumes"]}
    path = chart["mountPath"]
    assert mounts[path] in compose["volumes"], mounts
    assert vllm["environment"]["VLLM_CACHE_ROOT"] == f"{path}/vllm"
    assert vllm["environment"]["TORCHINDUCTOR_CACHE_DIR"] == f"{path}/inductor"
    dockerfile = (DOCKER / "vllm-rocm" / "Dockerfile").read_text()
    assert re.search(rf"mkdir -p [^\n]*\s{re.escape(path)}\s", dockerfile), "the image makes the directory"
    assert re.search(rf'chown "\$\{{VLLM_UID\}}:0" [^\n&]*\s{re.escape(path)}\s', dockerfile), "for its user"


@pytest.mark.parametrize("mode", ["", "FULL_DECODE_ONLY"])
def test_vllm_and_the_sidecar_get_the_same_cudagraph_mode(mode: str) -> None:
    """As the chart does: vLLM is given the mode explicitly, and the sidecar expects what vLLM was given (another
    mode in vLLM's config line is mode_mismatch). Default: FULL_AND_PIECEWISE, the chart's without a report."""
    services = load({"VLLM_CUDAGRAPH_MODE": mode} if mode else {})["services"]
    command = services["vllm"]["command"]
    flag = json.loads(command[command.index("--compilation-config") + 1])
    assert flag == {"cudagraph_mode": mode or "FULL_AND_PIECEWISE"}
    assert services["health"]["environment"]["VLLM_HEALTH_EXPECTED_MODE"] == flag["cudagraph_mode"]


def test_published_ports_bind_localhost() -> None:
    for name, svc in load()["services"].items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_default_images_are_what_bake_builds() -> None:
    bake = (DOCKER / "docker-bake.hcl").read_text()
    services = load()["services"]
    for name in ("vllm", "health"):
        image = services[name]["image"]
        assert f'"${{REGISTRY}}{image}"' in bake, f"{name}: default image {image} is not a bake tag"


def test_prometheus_is_optional_and_loads_the_chart_rules() -> None:
    compose = load()
    prom = compose["services"]["prometheus"]
    assert prom["profiles"] == ["monitoring"]
    assert all("profiles" not in compose["services"][s] for s in ("vllm", "health"))
    mounts = {v.split(":")[1]: (COMPOSE.parent / v.split(":")[0]).resolve() for v in prom["volumes"] if "/" in v}
    assert mounts["/etc/prometheus/prometheus.yml"] == PROMETHEUS.resolve()
    rules_mount = next(p for p in mounts if p.endswith("alerts.rules.yaml"))
    assert mounts[rules_mount] == RULES.resolve() and RULES.is_file()
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert rules_mount in config["rule_files"]


def test_prometheus_config_is_valid_and_matches_the_rule_selectors(tmp_path: Path) -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    selectors = set(re.findall(r'job=~"([^"]+)"', RULES.read_text()))
    assert selectors, "the alert rules select no job"
    for sel in selectors:
        assert any(re.fullmatch(sel, job) for job in jobs), f"no scrape job matches job=~{sel!r}"
    assert jobs["vllm-rocm-health"]["static_configs"][0]["targets"] == ["health:9400"]
    # promtool on a copy whose rule path points at the repository file (the container path does not exist here)
    local = dict(config, rule_files=[str(RULES)])
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(local))
    res = subprocess.run([tool("promtool"), "check", "config", str(copy)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_alertmanager_is_optional_and_wired_to_prometheus() -> None:
    """The alertmanager service (profile monitoring) runs the shipped routing file at the release the routing is tested
    with, keeps its data in a volume, publishes on localhost only, and is where Prometheus sends its alerts."""
    compose = load()
    am, prom = compose["services"]["alertmanager"], compose["services"]["prometheus"]
    assert am["profiles"] == ["monitoring"] and "alertmanager-data" in compose["volumes"]
    deb = pinned_versions()["ALERTMANAGER_DEB_VERSION"]
    assert am["image"] == f"prom/alertmanager:v{deb.split('-')[0]}", (am["image"], deb)
    flags = dict(a.split("=", 1) for a in am["command"])
    mounts = {v.split(":")[1]: v.split(":")[0] for v in am["volumes"]}
    assert (COMPOSE.parent / mounts[flags["--config.file"]]).resolve() == ALERTMANAGER.resolve()
    assert mounts[flags["--storage.path"]] == "alertmanager-data"
    assert flags["--cluster.listen-address"] == "", "a single Alertmanager: no gossip port"
    port = flags["--web.listen-address"].rsplit(":", 1)[1]
    assert am["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert f"http://127.0.0.1:{port}/-/ready" in am["healthcheck"]["test"]
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = [t for a in config["alerting"]["alertmanagers"] for s in a["static_configs"] for t in s["targets"]]
    assert targets == [f"alertmanager:{port}"]
    assert prom["depends_on"]["alertmanager"]["condition"] == "service_started"


@pytest.mark.parametrize("profile", [[], ["--profile", "monitoring"]], ids=["default", "monitoring"])
def test_podman_compose_config_resolves_what_these_tests_read(profile: list[str]) -> None:
    env = {"RENDER_GID": "109"}
    res = podman_compose("--dry-run", "-f", str(COMPOSE), *profile, "config", env=env)
    assert res.returncode == 0, res.stderr
    resolved = yaml.safe_load(res.stdout)
    ours = load(env)
    want = {n for n, svc in ours["services"].items() if not svc.get("profiles") or set(svc["profiles"]) & set(profile)}
    assert set(resolved["services"]) == want
    for name in want:
        theirs = resolved["services"][name]
        for key in ("image", "environment", "ports", "devices", "group_add", "ipc", "security_opt", "healthcheck"):
            if key in ours["services"][name]:
                assert theirs[key] == ours["services"][name][key], (name, key)


def test_podman_compose_up_dry_run_gives_the_rocm_container_setup(tmp_path: Path) -> None:
    """The `podman create` commands podman-compose would run (it asks podman one question, `ps`, answered
    from a private empty storage)."""
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{tmp_path / "root"}"\nrunroot = "{tmp_path / "run"}"\n')
    res = podman_compose(
        "--verbose",
        "--dry-run",
        "-f",
        str(COMPOSE),
        "--profile",
        "monitoring",
        "up",
        "-d",
        env={"RENDER_GID": "109", "CONTAINERS_STORAGE_CONF": str(conf)},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    creates, lines = {}, {}
    for line in (res.stdout + res.stderr).splitlines():
        if "podman create " in line:
            argv = shlex.split(line.split("podman create ", 1)[1])
            service = next(a.split("=", 1)[1] for a in argv if a.startswith("io.podman.compose.service="))
            creates[service], lines[service] = argv, line.rstrip()
    assert set(creates) == {"vllm", "health", "prometheus", "alertmanager", "grafana"}
    vllm, health = " ".join(creates["vllm"]), " ".join(creates["health"])
    assert "--device /dev/kfd --device /dev/dri" in vllm
    assert "--group-add 44 --group-add 109" in vllm
    assert "--security-opt seccomp=unconfined" in vllm and "--cap-add" not in vllm
    # podman-compose 1.6 does not apply `ipc: host` (docker/README.md says so): its users get a private IPC
    # namespace with the compose file's shm_size, the fallback the file keeps for that case.
    assert "--ipc" not in vllm and f"--shm-size {load()['services']['vllm']['shm_size']}" in vllm
    assert "-p 127.0.0.1:8000:8000" in vllm and "-p 127.0.0.1:9400:9400" in health
    log_volume = "source=vllm-rocm_vllm-logs,destination=/var/log/vllm"
    assert f"type=volume,{log_volume} " in vllm + " " and f"type=volume,{log_volume},ro" in health
    for name, svc in load({"RENDER_GID": "109"})["services"].items():  # image, then the command's arguments
        # As printed: podman-compose logs the argv joined by spaces, unquoted (vLLM's JSON argument has some).
        assert lines[name].endswith(" " + " ".join([svc["image"], *svc.get("command", [])])), name


def test_grafana_is_optional_and_reads_the_charts_dashboard() -> None:
    """Grafana (profile monitoring) gets the chart's dashboard file and provisioning equal to what
    vllm_rocm_stack.grafana writes, with the compose Prometheus as its datasource."""
    from vllm_rocm_stack.grafana import dashboards_yaml, datasource_yaml

    compose = load()
    grafana = compose["services"]["grafana"]
    assert grafana["profiles"] == ["monitoring"] and "grafana-data" in compose["volumes"]
    mounts = {v.split(":")[1]: (COMPOSE.parent / v.split(":")[0]).resolve() for v in grafana["volumes"] if "/" in v}
    prov = mounts["/etc/grafana/provisioning"]
    assert prov == (DOCKER / "grafana" / "provisioning").resolve()
    board_dir = "/var/lib/grafana/dashboards/vllm-rocm"
    assert mounts[board_dir] == (REPO / "charts" / "vllm-rocm" / "files" / "dashboards").resolve()
    assert (mounts[board_dir] / "vllm-rocm.json").is_file()
    prom = compose["services"]["prometheus"]
    prom_port = prom["command"][-1].rsplit(":", 1)[1]
    assert yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text()) == yaml.safe_load(
        datasource_yaml(f"http://prometheus:{prom_port}")
    )
    assert yaml.safe_load((prov / "dashboards" / "vllm-rocm.yaml").read_text()) == yaml.safe_load(
        dashboards_yaml(board_dir)
    )
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
