"""How the container tests decide that this machine cannot run containers (and are skipped, with the reason) or
that something is missing (and fail): vllm_rocm_stack.images.podman.Podman.refusal, on the real podman."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_rocm_stack.images import podman as podman_module
from vllm_rocm_stack.images.podman import Podman

pytestmark = pytest.mark.system


@pytest.fixture
def health_image(built_images: dict) -> str:
    return built_images["by_target"]["vllm-rocm-health"]["image"]


def test_a_machine_that_runs_containers_is_not_refused(health_image: str, tmp_path: Path) -> None:
    assert Podman(conf_dir=tmp_path / "containers").refusal(health_image) == ""


def test_a_runtime_that_cannot_start_a_container_is_reported(health_image: str, tmp_path: Path) -> None:
    """What a refusing kernel looks like from here: `podman run` fails. The reason names the command and carries
    podman's own words, which the skip message shows."""
    p = Podman(conf_dir=tmp_path / "containers")
    broken = tmp_path / "runc-refused"
    broken.write_text("#!/bin/sh\necho 'runc: container_linux.go: operation not permitted' >&2\nexit 1\n")
    broken.chmod(0o755)
    p.containers_conf.write_text(p.containers_conf.read_text().replace('runtime = "runc"', f'runtime = "{broken}"'))
    why = p.refusal(health_image)
    assert why.startswith("`podman run --rm --network bridge"), why
    assert "operation not permitted" in why or "runc-refused" in why, why


def test_a_missing_tool_is_a_failure_not_a_skip(
    health_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = Podman(conf_dir=tmp_path / "containers")
    real_which = podman_module.shutil.which
    monkeypatch.setattr(podman_module.shutil, "which", lambda name: None if name == "runc" else real_which(name))
    why = p.refusal(health_image)
    assert why.startswith("runc is not installed"), why  # the session fixture asserts on this, it does not skip
