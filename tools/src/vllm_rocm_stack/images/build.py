"""Build bake targets with buildah: the project's own Dockerfiles, build arguments and tags (docker-bake.hcl).

`--bases pinned` builds on the bases the Dockerfiles pin by digest (pulled from their registries).
`--bases stand-in` replaces only the base image, through the Dockerfile's own base-image build arguments
(the two variables of its `FROM ${IMAGE}@${DIGEST}`), with a local stand-in (standin.py); every other
argument is the bake file's. Stand-in images are tagged `<tag>-standin` so they are never taken for the
product. A manifest (JSON) records what was built from what, for the tests and for people.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import REPO
from . import bake
from .buildah import STORE, Buildah, BuildahError, ImageRef, ca_volumes, qualified
from .standin import StandIns

log = logging.getLogger(__name__)

STANDIN_SUFFIX = "-standin"
# Over this, the whole storage is emptied before a build (the layer cache starts cold): disk stays bounded.
MAX_STORE_BYTES = int(float(os.environ.get("VLLM_ROCM_IMAGES_MAX_GB", "16")) * 2**30)
_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", re.M | re.I)
_BASE_ARGS = re.compile(r"^\$\{(\w+)\}@\$\{(\w+)\}$")
# A step whose result came from the layer cache, in a build log (new results are not logged by ID reliably).
_CACHED_STEP = re.compile(r"^--> Using cache ([0-9a-f]{64})$", re.M)


@dataclass
class Built:
    target: str
    dockerfile: str
    image: str  # the first tag, as stored (localhost/...)
    tags: list[str]
    image_id: str
    build_args: dict[str, str]
    base: dict[str, str]  # {"name", "digest"}: what FROM resolved to
    standin: bool
    seconds: float
    log: str


@dataclass
class Manifest:
    driver: str
    store: str
    images: list[Built] = field(default_factory=list)
    standin_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    store_bytes: int = 0

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")


def default_targets() -> list[str]:
    """The default release's vLLM image and the sidecar (what one AMD node runs; releases.json names the default)."""
    from .. import releases

    return ["vllm-rocm-" + releases.load().default.replace(".", "_"), "vllm-rocm-health"]


def cpu_target() -> str:
    """The vLLM image of the release the CPU build serves (`make run`'s), built on the serving stand-in."""
    from .standin import cpu_release

    return "vllm-rocm-" + cpu_release().replace(".", "_")


def patched_target() -> str:
    """The newest prebuilt release whose series applies patches: the image whose build patches, verifies and labels
    (the default release's series may have nothing to apply)."""
    from ..generate import gen_bake

    _default, specs = gen_bake().load_matrix()
    return [s for s in specs if s.build == "prebuilt" and s.patch_level > 0][-1].target


def suite_targets() -> list[str]:
    """What the test suite builds, in one build (tests/support/images.py): the default targets, cpu_target() and
    patched_target()."""
    return list(dict.fromkeys([*default_targets(), cpu_target(), patched_target()]))


def base_pairs(dockerfile: Path) -> list[tuple[str, str]]:
    """The build-argument pairs naming the Dockerfile's base images, FROM ${IMAGE}@${DIGEST}, in order of first use
    (`FROM <stage>` lines are skipped). The final stage's pair is the product's base; another is a builder stage's
    (the vLLM Dockerfiles' tools stage: PYTHON_IMAGE/PYTHON_DIGEST, as docker/health/Dockerfile)."""
    text = dockerfile.read_text(encoding="utf-8")
    stages = {m.group(1).lower() for m in re.finditer(r"^FROM\s+.*\s+AS\s+(\S+)\s*$", text, re.M | re.I)}
    pairs: list[tuple[str, str]] = []
    for ref in _FROM.findall(text):
        if ref.lower() in stages:
            continue
        m = _BASE_ARGS.match(ref)
        if not m:
            raise BuildahError(f"{dockerfile}: FROM {ref} is not ${{IMAGE}}@${{DIGEST}}: its base cannot be replaced")
        if (m.group(1), m.group(2)) not in pairs:
            pairs.append((m.group(1), m.group(2)))
    if not pairs:
        raise BuildahError(f"{dockerfile}: no base image (FROM ${{IMAGE}}@${{DIGEST}})")
    return pairs


def base_args(dockerfile: Path) -> tuple[str, str]:
    """The two build arguments naming the image's own base: the final stage's FROM ${IMAGE}@${DIGEST}."""
    text = dockerfile.read_text(encoding="utf-8")
    last = _FROM.findall(text)[-1]
    m = _BASE_ARGS.match(last)
    if not m:
        raise BuildahError(f"{dockerfile}: the final FROM {last} is not ${{IMAGE}}@${{DIGEST}}")
    return m.group(1), m.group(2)


def base_arg_names(dockerfile: Path) -> set[str]:
    """Every build argument a stand-in build replaces (all base pairs)."""
    return {name for pair in base_pairs(dockerfile) for name in pair}


def cached_steps(log_text: str) -> set[str]:
    return set(_CACHED_STEP.findall(log_text))


def git_revision() -> str:
    try:
        proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except OSError:
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


@contextmanager
def store_lock(store: Path = STORE) -> Iterator[None]:
    """One build at a time per storage root (two pytest sessions of one checkout, or make images + tests)."""
    store.mkdir(parents=True, exist_ok=True)
    with open(store / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Builder:
    def __init__(self, buildah: Buildah | None = None, bases: str = "pinned") -> None:
        if bases not in ("pinned", "stand-in"):
            raise BuildahError(f"--bases {bases!r}: pinned or stand-in")
        self.b = buildah or Buildah()
        self.bases = bases
        self.standins = StandIns(self.b)

    def bake_file(self, env: Mapping[str, str] | None = None) -> bake.BakeFile:
        env = dict(os.environ if env is None else env)
        env.setdefault("REVISION", git_revision())  # what bake users pass by hand
        return bake.load(env=env)

    def base_for(self, target: bake.Target) -> ImageRef | None:
        if self.bases == "pinned":
            return None
        if target.dockerfile == "docker/health/Dockerfile":
            return self.standins.python()
        if target.dockerfile == "docker/vllm-rocm/Dockerfile":
            return self.standins.vllm(target.args["VLLM_RELEASE"])
        raise BuildahError(
            f"{target.name}: no stand-in base for {target.dockerfile} (a source build needs a ROCm "
            f"toolchain image; build it with --bases pinned where the registry is reachable)"
        )

    def builder_base_for(self, image_arg: str) -> ImageRef:
        """The stand-in of a builder stage's base (a pair other than the final stage's)."""
        if image_arg == "PYTHON_IMAGE":  # python:3.11-slim, as for docker/health/Dockerfile
            return self.standins.python()
        raise BuildahError(f"no stand-in for a builder stage FROM ${{{image_arg}}}@...")

    def build_args(self, target: bake.Target, base: ImageRef | None) -> dict[str, str]:
        args = dict(target.args)
        if base is not None:
            dockerfile = REPO / target.dockerfile
            image_arg, digest_arg = base_args(dockerfile)
            args[image_arg], args[digest_arg] = base.name, base.digest
            for pair in base_pairs(dockerfile):
                if pair != (image_arg, digest_arg):
                    builder = self.builder_base_for(pair[0])
                    args[pair[0]], args[pair[1]] = builder.name, builder.digest
        return args

    def build(
        self, target: bake.Target, context: Path = REPO, log_name: str | None = None, tags: list[str] | None = None
    ) -> Built:
        t0 = time.monotonic()
        base = self.base_for(target)
        args = self.build_args(target, base)
        dockerfile = REPO / target.dockerfile
        ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
        suffix = STANDIN_SUFFIX if base is not None else ""
        tags = tags if tags is not None else [t + suffix for t in target.tags]
        image_arg, digest_arg = base_args(dockerfile)
        image_id = self.b.bud(
            dockerfile,
            context / target.context,
            tags,
            args,
            log_name or target.name,
            ignorefile=ignore if ignore.is_file() else None,
            volumes=ca_volumes(),
            pull=base is None,
        )
        return Built(
            target=target.name,
            dockerfile=target.dockerfile,
            image=qualified(tags[0]) if tags else image_id,
            tags=[qualified(t) for t in tags],
            image_id=image_id,
            build_args=args,
            base={"name": args.get(image_arg, ""), "digest": args.get(digest_arg, "")},
            standin=base is not None,
            seconds=round(time.monotonic() - t0, 1),
            log=str(self.b.logs / f"{log_name or target.name}.log"),
        )

    def build_all(self, names: list[str]) -> Manifest:
        t0, started = time.monotonic(), time.time()
        with store_lock():
            self._clean_if_idle()
            manifest = Manifest(driver=self.b.driver, store=str(self.b.root))
            for target in self.bake_file().resolve(names):
                built = self.build(target)
                log.info("built %s (%s) in %.1f s", built.image, built.image_id[:12], built.seconds)
                manifest.images.append(built)
            self.collect_garbage([Path(img.log) for img in manifest.images], since=started)
            manifest.standin_seconds = {k: round(v, 1) for k, v in self.standins.timings.items()}
            manifest.seconds = round(time.monotonic() - t0, 1)
            manifest.store_bytes = self.b.disk_bytes()
        return manifest

    def prepare_standins(self, names: list[str], skip_cpu: bool = False) -> dict[str, float]:
        """Make the stand-in bases that a build of `names` will use, ahead of it (`make test` starts this beside the
        vLLM CPU setup, so that the system session's build begins with the images). skip_cpu: all but the vLLM CPU
        build's serving stand-in, which installs the wheels that setup downloads. Returns seconds per stand-in made."""
        from .standin import cpu_release

        if self.bases != "stand-in":
            raise BuildahError("stand-in bases are made only for --bases stand-in")
        skipped = cpu_release() if skip_cpu else None
        with store_lock():
            self._clean_if_idle()
            for target in self.bake_file().resolve(names):
                if skipped is not None and target.args.get("VLLM_RELEASE") == skipped:
                    log.info("%s: its serving stand-in waits for the vLLM CPU wheels", target.name)
                    continue
                self.build_args(target, self.base_for(target))  # the final stage's base, then the builder stages'
        return {k: round(v, 1) for k, v in self.standins.timings.items()}

    def _clean_if_idle(self) -> None:
        with self.b.idle() as idle:
            if idle:
                self._clean()
            else:  # another process runs containers of these images: nothing of theirs is touched
                log.info("containers of %s are in use: leftovers stay, the storage is not emptied", self.b.root)

    def _clean(self) -> None:
        """Empty a storage grown past MAX_STORE_BYTES (the layer cache starts cold), and remove the working
        containers an interrupted run left behind."""
        size = self.b.disk_bytes()
        if size > MAX_STORE_BYTES:
            log.warning(
                "image storage %s holds %.1f GiB (> %.1f GiB): emptying it; the layer cache starts cold",
                self.b.root,
                size / 2**30,
                MAX_STORE_BYTES / 2**30,
            )
            self.b.wipe()
        self.b("rm", "--all", check=False)

    def collect_garbage(self, logs: list[Path], since: float) -> None:
        """Remove the untagged images that the builds logged in `logs` (started at `since`) did not use: layers
        of older builds (each source change leaves a chain behind) and of failed builds. A build used the
        steps it took from the cache (logged) and the ones it made (created since it started); the builder
        stage of a multi-stage build is among them, which `buildah rmi --prune` would drop (it has no tag and
        no child image): the next build would then download the sidecar's dependencies again."""
        used: set[str] = set()
        for path in logs:
            used |= cached_steps(path.read_text(encoding="utf-8", errors="replace"))
        stale = [
            img["id"]
            for img in self.b.images()
            if not img.get("names")
            and img.get("created", 0) < since - 1
            and not any(u.startswith(img["id"]) for u in used)
        ]
        if stale:
            log.info("removing %d image(s) that no current build uses", len(stale))
            self.b("rmi", *stale, check=False)
