"""podman (and podman-compose), standing in for docker where the images are RUN: the READMEs' `docker run` lines and
`docker compose up`, for real, on a machine without an AMD GPU or a Docker engine.

Everything stays under .work/: podman uses the image builds' own storage (the Buildah root, so what `make images`
built is what runs, with no copy), and its own containers.conf and storage.conf in .work/containers/, handed over
by CONTAINERS_CONF / CONTAINERS_STORAGE_CONF (never /etc/containers or /var/lib/containers). Named volumes live in
that storage; networks in .work/containers/networks.

What these machines need, found by trying (Debian 12's podman 4.3): Debian's runc (crun refuses the hybrid
cgroups), cgroupfs (no systemd), no default ulimits (raising them is refused), netavark + aardvark-dns for the
bridge network compose makes with service-name DNS. Without systemd, podman runs no healthcheck timers:
`healthcheck()` runs a container's HEALTHCHECK command as the timer would, and podman-compose's `service_healthy`
waits need podman >= 4.6, so they order services only here (podman-compose says so with a warning).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from vllm_rocm_core.files import write_atomic

from ..config import WORK
from .buildah import Buildah, BuildahError, tail

log = logging.getLogger(__name__)

CONF_DIR = WORK / "containers"
# podman's complaints that carry no information here (no systemd for healthcheck timers, no syslog socket).
_NOISE = ("unable to get systemd connection", "failed to connect to syslog")


class ContainersRefused(BuildahError):
    """The kernel or sandbox refuses to run containers: the message says what was tried and what failed."""


def quiet(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not any(n in line for n in _NOISE))


class Podman:
    def __init__(self, buildah: Buildah | None = None, conf_dir: Path = CONF_DIR) -> None:
        if shutil.which("podman") is None:
            raise BuildahError("podman is not installed: run `make setup` (tools/bootstrap.sh installs it)")
        self.b = buildah or Buildah()
        self.conf_dir = conf_dir
        self.tmp = conf_dir / "tmp"
        for d in (conf_dir / "networks", self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        self.containers_conf = conf_dir / "containers.conf"
        self.storage_conf = conf_dir / "storage.conf"
        # Every Podman writes them while another session's podman may be reading them (CI of 16fbd84: a truncated
        # storage.conf): whole, and untouched when unchanged.
        write_atomic(
            self.containers_conf,
            "# Written by vllm_rocm_stack/images/podman.py; see its docstring.\n"
            "[containers]\ndefault_ulimits = []\n"
            f'[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\nevents_logger = "file"\n'
            f'events_logfile_path = "{conf_dir / "events.log"}"\ntmp_dir = "{conf_dir / "libpod-tmp"}"\n'
            f'[network]\nnetwork_backend = "netavark"\nnetwork_config_dir = "{conf_dir / "networks"}"\n',
            unchanged_stays=True,
        )
        write_atomic(
            self.storage_conf,
            f'[storage]\ndriver = "{self.b.driver}"\ngraphroot = "{self.b.root / "storage"}"\n'
            f'runroot = "{self.b.root / "run"}"\n',
            unchanged_stays=True,
        )

    @property
    def env(self) -> dict[str, str]:
        return {
            **self.b.env,
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
            "TMPDIR": str(self.tmp),
        }

    def __call__(
        self, *args: str, timeout: float = 600, check: bool = True, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}
        )
        proc.stderr = quiet(proc.stderr)
        if check and proc.returncode != 0:
            raise BuildahError(
                f"podman {' '.join(args[:4])} ... failed ({proc.returncode}):\n{tail(proc.stdout + proc.stderr)}"
            )
        return proc

    def compose_argv(self, files: Sequence[Path], project: str, *args: str) -> list[str]:
        """podman-compose from this interpreter's environment (the dev lock pins it), as `docker compose`."""
        exe = Path(sys.executable).parent / "podman-compose"
        argv = [str(exe) if exe.exists() else "podman-compose", "--project-name", project]
        for f in files:
            argv += ["-f", str(f)]
        return [*argv, *args]

    def compose(
        self,
        files: Sequence[Path],
        project: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 600,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        argv = self.compose_argv(files, project, *args)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})})
        proc.stderr = quiet(proc.stderr)
        if check and proc.returncode != 0:
            raise BuildahError(
                f"{' '.join(argv[:3])} ... {' '.join(args)} failed ({proc.returncode}):\n"
                f"{tail(proc.stdout + proc.stderr)}"
            )
        return proc

    def refusal(self, image: str) -> str:
        """Why containers cannot run here ("" when they can): a throwaway container of `image` on a bridge
        network, which is what the compose tests need (a host-network run alone would hide a missing netavark)."""
        for tool in ("runc", "/usr/lib/podman/netavark", "/usr/lib/podman/aardvark-dns"):
            if shutil.which(tool) is None and not Path(tool).exists():
                return f"{Path(tool).name} is not installed: run `make setup` (tools/bootstrap.sh installs it)"
        proc = self("run", "--rm", "--network", "bridge", "--entrypoint", "true", image, check=False, timeout=300)
        if proc.returncode != 0:
            return (
                f"`podman run --rm --network bridge --entrypoint true {image}` failed ({proc.returncode}) with "
                f"runc, cgroupfs and netavark:\n{tail(proc.stdout + proc.stderr, 15)}"
            )
        return ""

    def inspect(self, container: str) -> dict:
        return json.loads(self("container", "inspect", container).stdout)[0]

    def healthcheck(self, container: str) -> tuple[bool, str]:
        """Run the container's HEALTHCHECK once, as podman's timer would (there is no systemd here)."""
        proc = self("healthcheck", "run", container, check=False, timeout=120)
        return proc.returncode == 0, (proc.stdout + proc.stderr).strip()

    def remove_everything(self) -> None:
        """Every container, pod, named volume and network of this storage (make clean, and after a failed test)."""
        self("rm", "--all", "--force", "--time", "10", check=False, timeout=300)
        self("pod", "rm", "--all", "--force", check=False, timeout=300)
        self("volume", "prune", "--force", check=False)
        self("network", "prune", "--force", check=False)
