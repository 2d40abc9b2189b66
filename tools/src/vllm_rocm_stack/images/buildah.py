"""buildah, the daemonless image builder, with its whole storage under .work/ (never /var/lib/containers).

Runs as root with chroot isolation: the OCI runtime path does not work on these machines, a chroot does.
The storage driver is overlay where the kernel mounts it (layers store differences: a build with many steps
costs little disk and time), else vfs (every layer a full copy: measured ~15x slower and ~5x the disk on a
small build); VLLM_ROCM_BUILDAH_DRIVER forces one. Each driver has its own storage root, since one root
cannot change driver. Every command's output is kept: a failed build raises BuildFailed naming the
Dockerfile step that failed, with the tail of the build log.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vllm_rocm_core.files import write_atomic

from ..config import WORK
from ..disk import tree_bytes

log = logging.getLogger(__name__)

STORE = WORK / "buildah"
DRIVER_ENV = "VLLM_ROCM_BUILDAH_DRIVER"
# buildah's last word on a failed Dockerfile step: `Error: building at STEP "RUN ...": exit status 1`
_FAILED_STEP = re.compile(r'^Error: building at STEP "(?P<step>.*)": (?P<reason>.*)$', re.M)
# Otherwise (a FROM that cannot be pulled, say) the last step started and the last error line say it.
_STEP = re.compile(r"^(?:\[\d+/\d+\] )?STEP \d+/\d+: (.*)$", re.M)
_ERROR = re.compile(r"^Error: (.*)$", re.M)
# buildah re-executes itself from a sealed memfd copy before it unshares for a chroot run (containers/storage,
# pkg/unshare/unshare.c, copy_self_proc_exe, vendored in buildah 1.28.2). The kernel refuses F_SEAL_WRITE with EBUSY
# while a page of the copy is still pinned, and buildah exits 1 before the command in the container ran (a warm
# `make test`, 2026-12-05: `buildah run` of `sh -c ...`). Nothing ran, so the whole invocation is run again.
TRANSIENT = "sealing memfd copy: Device or resource busy"
TRIES = 3


def transient(returncode: int | None, output: str) -> bool:
    """Whether a buildah that ended with `returncode` and printed `output` stopped as TRANSIENT: worth running again."""
    return returncode != 0 and TRANSIENT in output


class BuildahError(RuntimeError):
    """A buildah command failed; the message carries its output's tail."""


class BuildFailed(BuildahError):
    """`buildah bud` failed. `step` is the Dockerfile instruction it failed at (as buildah prints it, ARGs
    expanded), or "" when it failed before any step (bad arguments, missing base image)."""

    def __init__(self, message: str, step: str, reason: str, log_path: Path, log_tail: str) -> None:
        super().__init__(message)
        self.step = step
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _overlay_works(scratch: Path) -> bool:
    """Can this kernel mount overlayfs with layers on the .work/ filesystem? (the test buildah's overlay
    driver also needs; done by hand so the answer is known before a storage root is created)."""
    dirs = {n: scratch / n for n in ("lower", "upper", "work", "merged")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    try:
        ok = (
            subprocess.run(
                ["mount", "-t", "overlay", "overlay", "-o", opts, str(dirs["merged"])], capture_output=True, timeout=30
            ).returncode
            == 0
        )
        if ok:
            subprocess.run(["umount", str(dirs["merged"])], capture_output=True, timeout=30, check=True)
        return ok
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def choose_driver(store: Path = STORE) -> str:
    forced = os.environ.get(DRIVER_ENV, "").strip()
    if forced:
        if forced not in ("overlay", "vfs"):
            raise BuildahError(f"{DRIVER_ENV}={forced!r}: must be overlay or vfs")
        return forced
    # A probe directory of its own: two processes probing at once must not remove each other's (a failed probe means
    # vfs, ~5x the disk).
    store.mkdir(parents=True, exist_ok=True)
    return "overlay" if _overlay_works(Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=store))) else "vfs"


@dataclass(frozen=True)
class ImageRef:
    """A local image by name and manifest digest: what a Dockerfile's `FROM name@digest` resolves to."""

    name: str  # e.g. localhost/vllm-rocm-standin/debian:1a2b3c4d5e6f
    digest: str  # sha256:...

    @property
    def pinned(self) -> str:
        return f"{self.name}@{self.digest}"


class Buildah:
    def __init__(self, store: Path = STORE, driver: str | None = None) -> None:
        if os.geteuid() != 0:
            raise BuildahError("image builds need root (buildah with chroot isolation); run as root")
        if shutil.which("buildah") is None:
            raise BuildahError("buildah is not installed: run `make setup` (tools/bootstrap.sh installs it)")
        self.driver = driver or choose_driver(store)
        self.root = store / self.driver
        self.logs = store / "logs"
        self.tmp = store / "tmp"
        for d in (self.root / "storage", self.root / "run", self.logs, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        self.registries = store / "registries.conf"
        # Rewritten by every Buildah while other sessions' builds read it: whole, and untouched when unchanged.
        write_atomic(
            self.registries,
            'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n',
            unchanged_stays=True,
        )

    def argv(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--root",
            str(self.root / "storage"),
            "--runroot",
            str(self.root / "run"),
            "--storage-driver",
            self.driver,
            *args,
        ]

    @property
    def env(self) -> dict[str, str]:
        # Large temporary files (layer diffs, commits) stay under .work/ too. A short name in a FROM line
        # (rocm/vllm) means docker.io, as for Docker, unless the caller configured registries otherwise.
        return {
            "CONTAINERS_REGISTRIES_CONF": str(self.registries),
            **os.environ,
            "TMPDIR": str(self.tmp),
            "BUILDAH_ISOLATION": "chroot",
        }

    def __call__(
        self, *args: str, timeout: float = 600, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = self._run(args, timeout, stdin.decode() if stdin is not None else None)
        if check and proc.returncode != 0:
            raise BuildahError(
                f"buildah {' '.join(args[:3])} ... failed ({proc.returncode}):\n{tail(proc.stdout + proc.stderr)}"
            )
        return proc

    def _run(self, args: Sequence[str], timeout: float, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """`buildah *args`, run again (TRIES in all) while it fails with TRANSIENT, before anything it was asked ran."""
        attempt = 1
        while True:
            proc = subprocess.run(
                self.argv(*args), capture_output=True, text=True, timeout=timeout, env=self.env, input=stdin
            )
            if not transient(proc.returncode, proc.stderr) or attempt >= TRIES:
                return proc
            attempt += 1
            log.warning(
                "buildah %s stopped before it ran anything (%s): try %d of %d", args[0], TRANSIENT, attempt, TRIES
            )

    # --- images ---------------------------------------------------------------------------------------------
    def exists(self, ref: str) -> bool:
        """Whether the store has the image. Only buildah's "image not known" means no: any other failure (a store
        another process holds in a bad state, a bad reference) raises, rather than being taken for a missing image
        and rebuilt, which gives a cached stand-in a new digest and every image built on it a new key."""
        proc = self("inspect", "--type", "image", ref, check=False)
        if proc.returncode == 0:
            return True
        if "image not known" in proc.stderr:
            return False
        raise BuildahError(f"buildah inspect {ref} failed ({proc.returncode}):\n{tail(proc.stdout + proc.stderr)}")

    def inspect(self, ref: str) -> dict:
        return json.loads(self("inspect", "--type", "image", ref).stdout)

    def config(self, ref: str) -> dict:
        """The image's Docker/OCI config (Entrypoint, Cmd, User, Env, Labels, Healthcheck, ...)."""
        data = self.inspect(ref)
        docker = data.get("Docker") or {}
        return docker.get("config") or (data.get("OCIv1") or {}).get("config") or {}

    def ref(self, name: str) -> ImageRef:
        data = self.inspect(name)
        digest = data.get("FromImageDigest") or ""
        if not digest.startswith("sha256:"):
            raise BuildahError(f"{name}: no manifest digest in storage")
        return ImageRef(name=qualified(name), digest=digest)

    def images(self) -> list[dict]:
        return json.loads(self("images", "--all", "--json").stdout or "[]")

    def remove_images(self, refs: Sequence[str]) -> None:
        if refs:
            self("rmi", "--force", *refs, check=False)

    def remove_unused_images(self, refs: Sequence[str]) -> list[str]:
        """Remove each image no container uses (`rmi` without --force, which would remove the containers too: another
        session's running test, a compose stack); the ones kept, in use."""
        return [ref for ref in refs if self("rmi", ref, check=False).returncode != 0]

    def disk_bytes(self) -> int:
        return tree_bytes(self.root / "storage")

    def wipe(self) -> None:
        """Every container and image of this storage root (the layer cache starts cold)."""
        self("umount", "--all", check=False)
        self("rm", "--all", check=False)
        self("rmi", "--all", "--force", check=False)

    # --- builds ---------------------------------------------------------------------------------------------
    def bud(
        self,
        dockerfile: Path,
        context: Path,
        tags: Sequence[str],
        build_args: Mapping[str, str],
        log_name: str,
        ignorefile: Path | None = None,
        volumes: Sequence[str] = (),
        pull: bool = False,
        timeout: float = 1800,
    ) -> str:
        """Build with the layer cache (--layers) in Docker format (SHELL and HEALTHCHECK are Docker-format
        only). Returns the image ID; raises BuildFailed with the failing step and the log tail."""
        log_path = self.logs / f"{log_name}.log"
        argv = [
            "bud",
            "--isolation",
            "chroot",
            "--layers",
            "--format",
            "docker",
            "--force-rm",
            "--pull" if pull else "--pull-never",
            "-f",
            str(dockerfile),
        ]
        if ignorefile is not None:
            argv += ["--ignorefile", str(ignorefile)]
        for k, v in build_args.items():
            argv += ["--build-arg", f"{k}={v}"]
        for t in tags:
            argv += ["-t", t]
        for v in volumes:
            argv += ["--volume", v]
        iidfile = self.tmp / f"{log_name}.iid"
        iidfile.unlink(missing_ok=True)
        argv += ["--iidfile", str(iidfile), str(context)]
        log.info("buildah bud -f %s (log: %s)", dockerfile, log_path)
        with open(log_path, "w", encoding="utf-8") as out:
            for attempt in range(1, TRIES + 1):
                out.write("$ " + " ".join(self.argv(*argv)) + "\n")
                out.flush()
                start = log_path.stat().st_size
                try:
                    rc = subprocess.run(
                        self.argv(*argv), stdout=out, stderr=subprocess.STDOUT, env=self.env, timeout=timeout
                    ).returncode
                except subprocess.TimeoutExpired:
                    rc = -1
                    out.write(f"\nbuild stopped: no result within {timeout:.0f} s\n")
                out.flush()
                # A RUN step that failed as TRANSIENT ran nothing: build again (the steps before come from --layers).
                with open(log_path, "rb") as again:
                    again.seek(start)
                    this = again.read().decode(errors="replace")
                if not transient(rc, this) or attempt == TRIES:
                    break
                out.write(f"\n{TRANSIENT}: building again, try {attempt + 1} of {TRIES}\n")
                log.warning(
                    "buildah bud -f %s: %s; building again (try %d of %d)", dockerfile, TRANSIENT, attempt + 1, TRIES
                )
        text = log_path.read_text(encoding="utf-8", errors="replace")
        if rc != 0 or not iidfile.is_file():
            failed, started, errors = (list(r.finditer(text)) for r in (_FAILED_STEP, _STEP, _ERROR))
            if failed:
                step, reason = failed[-1].group("step"), failed[-1].group("reason")
            else:
                step = started[-1].group(1) if started else ""
                reason = errors[-1].group(1) if errors else ""
            where = f'at step "{step[:160]}"' if step else "before any step"
            raise BuildFailed(
                f"buildah bud -f {dockerfile} failed {where} (exit {rc}); log {log_path}; last lines:\n{tail(text)}",
                step,
                reason,
                log_path,
                tail(text),
            )
        return iidfile.read_text().strip().removeprefix("sha256:")

    @contextmanager
    def container(self, image: str) -> Iterator[str]:
        """A working container of `image`, removed afterwards whatever happens. It holds the store's containers
        lock shared while it lives, so that a build in another process does not take it for a leftover (`idle`)."""
        with open(self.root / "containers.lock", "a+") as hold:
            fcntl.flock(hold, fcntl.LOCK_SH)  # released as the file closes
            name = self("from", "--pull-never", image).stdout.strip().splitlines()[-1]
            try:
                yield name
            finally:
                self("rm", name, check=False)

    @contextmanager
    def idle(self) -> Iterator[bool]:
        """True while no process holds a working container of this store (`container`) and no other container
        (podman's) exists: only then may a build remove leftovers or empty the storage. False at once otherwise
        (`make images` while a test session runs containers of these images); the caller goes on."""
        with open(self.root / "containers.lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                others = self("containers", "--all", "--quiet", check=False).stdout.split()
                builders = self("containers", "--quiet", check=False).stdout.split()
                yield not set(others) - set(builders)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @contextmanager
    def mounted(self, image: str) -> Iterator[Path]:
        """The image's filesystem, mounted read-write in a throwaway container: read files without running
        anything in the image."""
        with self.container(image) as ctr:
            mnt = Path(self("mount", ctr).stdout.strip())
            try:
                yield mnt
            finally:
                self("umount", ctr, check=False)

    def run_argv(
        self, container: str, command: Sequence[str], env: Mapping[str, str] | None = None, volumes: Sequence[str] = ()
    ) -> list[str]:
        """argv of `buildah run` (chroot isolation, the host's network) for a process the caller manages."""
        return self.argv(*_run_args(container, command, env, volumes))

    def run(
        self,
        container: str,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        volumes: Sequence[str] = (),
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """`buildah run` of a command that ends by itself: its exit status and output.

        The output comes back through files on a bind-mounted host directory, not buildah's stdio relay: a
        `buildah run` of `sh -c 'dirname ...'` once returned 0 with nothing on either stream (a fresh clone under
        load, 2026-12-06; 120 more runs of it beside a CPU hog did not repeat it). A marker the container's shell
        writes before it execs the command tells "buildah never started it" (run again, as for TRANSIENT: nothing
        ran) from "it printed nothing". Needs /bin/sh in the image."""
        for attempt in range(1, TRIES + 1):
            with tempfile.TemporaryDirectory(dir=self.tmp, prefix="run-") as tmp:
                io = Path(tmp)
                io.chmod(0o777)  # the image's user may be anyone
                for name in ("stdout", "stderr"):
                    (io / name).touch()
                    (io / name).chmod(0o666)
                wrapped = ["/bin/sh", "-c", _RUN_WRAPPER, "sh", *command]
                proc = self._run(_run_args(container, wrapped, env, [*volumes, f"{io}:{_RUN_IO}"]), timeout)
                started = (io / "started").exists()
                stdout, stderr = (
                    (io / "stdout").read_text(errors="replace"),
                    (io / "stderr").read_text(errors="replace"),
                )
            if started or proc.returncode != 0:
                # buildah's own messages (a failure to set the container up) follow the command's.
                return subprocess.CompletedProcess(
                    proc.args, proc.returncode, stdout, stderr + proc.stdout + proc.stderr
                )
            if attempt < TRIES:
                log.warning("buildah run returned 0 without starting %s: try %d of %d", command[0], attempt + 1, TRIES)
        raise BuildahError(
            f"buildah run returned 0 {TRIES} times without starting {list(command)}:\n{tail(proc.stderr)}"
        )


# Where Buildah.run's container finds the host directory its output goes to, and the shell that writes it.
_RUN_IO = "/.vllm-rocm-run"
_RUN_WRAPPER = f': > {_RUN_IO}/started && exec "$@" > {_RUN_IO}/stdout 2> {_RUN_IO}/stderr'


def _run_args(
    container: str, command: Sequence[str], env: Mapping[str, str] | None, volumes: Sequence[str]
) -> list[str]:
    args = ["run", "--isolation", "chroot"]
    for k, v in (env or {}).items():
        args += ["--env", f"{k}={v}"]
    for v in volumes:
        args += ["--volume", v]
    return [*args, container, "--", *command]


def ca_volumes() -> list[str]:
    """This host's CA bundle, lent read-only to RUN steps and stand-in recipes (never stored in a layer): pip
    and apt there trust what the host trusts (a TLS-inspecting proxy included); Debian-based bases read this path."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    return [f"{bundle}:{bundle}:ro"] if bundle.is_file() else []


def qualified(name: str) -> str:
    """buildah stores `foo:1` as `localhost/foo:1`; the FROM line must name what is stored."""
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"localhost/{name}"


def container_main_pid(run_pid: int) -> int | None:
    """The process a `buildah run` (pid `run_pid`, started as a process-group leader) runs in the container:
    what `docker stop` signals. With chroot isolation it is the child of `buildah-chroot-exec`, in the same
    process group. None when it has not started or has already exited."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            ppid, pgid = int(fields[1]), int(fields[2])
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        if pgid == run_pid and parent == b"buildah-chroot-exec":
            return int(entry.name)
    return None
