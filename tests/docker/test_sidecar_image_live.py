"""The built sidecar image, run (buildah, chroot isolation: the host's network) against the REAL vLLM CPU server.

Configured as docker/compose.yaml with its compose.baseline.yaml overlay configures it (its `health` service
environment: the log file on the shared volume, JSON logs, the canary's baseline mounted where the overlay puts it:
the baseline recorded from this server through the real CLI), with two local differences: the vLLM URL is a
pass-through proxy in front of the server (the failure injector: it drops connections on cue, as while vLLM
restarts) and the listen address is a free loopback port. The server's own log file is mounted read-only where
compose puts it. The image's entrypoint and user are the image's; nothing is installed or changed in it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_qualify.processes import ManagedProcess, wait_until
from vllm_rocm_stack.images.buildah import TRIES, Buildah, container_main_pid, transient
from vllm_rocm_stack.proxy import SwitchableProxy
from vllm_rocm_stack.sidecar_process import free_port, get
from vllm_rocm_stack.vllm_server import VllmServer

from tests.support.canary import CanaryTiming
from tests.support.docker_shim import services
from tests.support.images import BUILD_TIMEOUT
from tests.support.repo import DOCKER

pytestmark = [pytest.mark.system, pytest.mark.timeout(BUILD_TIMEOUT + 600)]

HEALTH_DOCKERFILE = "docker/health/Dockerfile"
START_TIMEOUT = 60.0  # the sidecar answers /healthz in ~1 s; this only bounds a hang


class SidecarContainer:
    def __init__(self, buildah: Buildah, image: str, env: dict[str, str], volumes: list[str], log_path: Path) -> None:
        self.buildah = buildah
        self.url = f"http://127.0.0.1:{env['VLLM_HEALTH_LISTEN'].rsplit(':', 1)[1]}"
        cfg = buildah.config(image)
        self._ctx = buildah.container(image)
        ctr = self._ctx.__enter__()
        argv = buildah.run_argv(ctr, [*cfg["Entrypoint"], *(cfg.get("Cmd") or [])], env=env, volumes=volumes)
        self.process = ManagedProcess("sidecar image", argv, log_path, env=buildah.env)
        self.process.start()

    def wait_started(self) -> None:
        tries = 1

        def up() -> bool:
            nonlocal tries
            if not self.process.alive():
                # buildah stopped before it ran the sidecar (vllm_rocm_stack.images.buildah.TRANSIENT): start it again.
                if transient(self.process.returncode(), self.process.log_tail(5)) and tries < TRIES:
                    tries += 1
                    self.process.start()
                    return False
                raise AssertionError(
                    f"the sidecar container exited {self.process.returncode()}:\n{self.process.log_tail(40)}"
                )
            try:
                return get(self.url + "/healthz", 1)[0] == 200
            except OSError:
                return False

        assert wait_until(up, START_TIMEOUT, 0.2), self.process.log_tail(40)

    def ready(self) -> tuple[int, dict]:
        code, body = get(self.url + "/readyz")
        return code, json.loads(body)

    def wait_ready(self, want: int, timeout: float = 60.0) -> dict:
        assert wait_until(lambda: self.ready()[0] == want, timeout, 0.2), (self.ready(), self.process.log_tail(40))
        return self.ready()[1]

    def stop(self) -> int | None:
        """As `docker stop`: SIGTERM to the container's process, then (after 20 s) SIGKILL to everything."""
        try:
            pid = container_main_pid(self.process.pid) if self.process.pid else None
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
                try:
                    return self.process.proc.wait(20) if self.process.proc else None
                except subprocess.TimeoutExpired:
                    pass
            return self.process.stop(timeout=5, sig=signal.SIGKILL)
        finally:
            self._ctx.__exit__(None, None, None)


def compose_env() -> dict[str, str]:
    """The health service's environment as compose.yaml, the CPU overlay and the baseline overlay merge it."""
    env: dict[str, str] = {}
    for name in ("compose.yaml", "compose.cpu.yaml", "compose.baseline.yaml"):
        env.update({k: str(v) for k, v in services(DOCKER / name)["health"]["environment"].items()})
    return env


@pytest.fixture(scope="module")
def sidecar(
    built_images: dict,
    vllm_server: VllmServer,
    proxy: SwitchableProxy,
    baseline_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SidecarContainer]:
    img = built_images["by_dockerfile"][HEALTH_DOCKERFILE]
    env = compose_env()
    log_in_container = env["VLLM_HEALTH_LOG_SOURCE"].removeprefix("file:")
    env.update(
        {
            "VLLM_HEALTH_VLLM_URL": proxy.url,
            "VLLM_HEALTH_LISTEN": f"127.0.0.1:{free_port()}",
            "VLLM_HEALTH_HEALTH_INTERVAL": "0.5",
            "VLLM_HEALTH_HEALTH_TIMEOUT": "2",
        }
    )
    sc = SidecarContainer(
        Buildah(driver=built_images["driver"]),
        img["image"],
        env,
        [f"{vllm_server.log_path}:{log_in_container}:ro", f"{baseline_file}:{env['VLLM_HEALTH_CANARY_BASELINE']}:ro"],
        tmp_path_factory.mktemp("sidecar-image") / "sidecar.out",
    )
    try:
        sc.wait_started()
        yield sc
    finally:
        rc = sc.stop()
    assert rc == 0, f"the sidecar did not stop cleanly ({rc}):\n{sc.process.log_tail(40)}"


def test_image_sidecar_is_ready_on_the_real_server(sidecar: SidecarContainer, canary_timing: CanaryTiming) -> None:
    body = sidecar.wait_ready(200, canary_timing.patience)  # after a canary pass on the real server
    assert body == {"ready": True, "reason": "ok"}
    code, metrics = get(sidecar.url + "/metrics")
    text = metrics.decode()
    assert code == 200
    values = {line.split()[0]: line.split()[1] for line in text.splitlines() if line and not line.startswith("#")}
    # From the real server's log, read through the mount: an eager CPU engine, the log source up.
    assert values.get("vllm_sidecar_log_source_up") == "1.0", text
    assert values.get("vllm_engine_eager_mode") == "1.0", text
    assert values.get("vllm_canary_configured") == "1.0", text  # the overlay's baseline reached the canary
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    # compose sets JSON logs: every line the image's process wrote is a JSON object
    lines = [ln for ln in sidecar.process.log_path.read_text().splitlines() if ln.startswith("{")]
    assert lines and all(isinstance(json.loads(ln), dict) for ln in lines)


def test_image_sidecar_readiness_follows_the_server(
    sidecar: SidecarContainer, proxy: SwitchableProxy, canary_timing: CanaryTiming
) -> None:
    sidecar.wait_ready(200, canary_timing.patience)
    proxy.inject("down")
    try:
        body = sidecar.wait_ready(503)
        assert "/health is failing" in body["reason"], body
    finally:
        proxy.inject(None)
    # The outage started a new engine instance: Ready again only after a canary pass on it.
    assert sidecar.wait_ready(200, canary_timing.patience)["reason"] == "ok"
