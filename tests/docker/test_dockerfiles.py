"""The Dockerfiles are correct by construction (no engine here): parsed with dockerfile-parse and checked.

Every COPY source exists and survives the Dockerfile's own .dockerignore; every ARG has a default (a bare ARG
inside a stage re-imports a global one that has); base images resolve to name:tag@sha256:<digest>; the labels,
the non-root numeric USER, the documented ENV defaults and the entrypoints are there; and the defaults of the
vLLM Dockerfiles agree with releases.json and the patch series.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

import pytest
import tomllib
from vllm_rocm_stack import generate

from tests.support import product_wheel
from tests.support.dockerfiles import VAR, Parsed, parse, resolve, stage_values
from tests.support.repo import DOCKER, DOCKERFILES, REPO, VLLM_DOCKERFILES

gen_bake = generate.gen_bake()

IDS = {"ids": lambda p: str(p.relative_to(REPO))}
PINNED = re.compile(r"^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$")
OCI_LABELS = {
    "org.opencontainers.image.base.name",
    "org.opencontainers.image.base.digest",
    "org.opencontainers.image.source",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.version",
}
VLLM_LABELS = {
    "io.vllm-rocm.vllm-release",
    "io.vllm-rocm.patch-series",
    "io.vllm-rocm.patch-series-sha256",
    "io.vllm-rocm.tools",
}
# ARGs a build must be given: the base digest, when the default release's base has none verified (releases.json;
# docker-bake.hcl names the variable that fills it). A placeholder stands in for it where a test resolves FROM.
_DEFAULT, _SPECS = gen_bake.load_matrix()
REQUIRED_ARGS: set[str] = set() if next(s for s in _SPECS if s.release == _DEFAULT).base_digest else {"BASE_DIGEST"}
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


def test_vllm_and_health_dockerfiles_found() -> None:
    assert len(VLLM_DOCKERFILES) == 2 and len(DOCKERFILES) == 3


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **IDS)
def test_every_arg_has_a_default(dockerfile: Path) -> None:
    p = parse(dockerfile)
    missing = [k for k, v in p.global_args.items() if v is None and k not in REQUIRED_ARGS]
    for stage in p.stages:
        missing += [
            k for k, v in stage.args.items() if v is None and p.global_args.get(k) is None and k not in REQUIRED_ARGS
        ]
    assert missing == [], f"ARGs without a default (give one or list them in REQUIRED_ARGS): {missing}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **IDS)
def test_every_variable_used_is_declared(dockerfile: Path) -> None:
    p = parse(dockerfile)
    for stage in p.stages:
        declared = set(stage.args) | stage.env | {"PATH", "HOME"}
        for ins in stage.instructions:
            if ins["instruction"] in ("ARG", "ENV"):
                if ins["instruction"] == "ENV":
                    declared |= stage.env
                continue
            for var in VAR.findall(ins["value"]):
                if var.isupper():  # lower-case names are the shell's own locals inside RUN
                    assert var in declared, f"line {ins['startline'] + 1}: ${var} is not an ARG/ENV of this stage"
    for stage in p.stages:
        for var in VAR.findall(stage.base):
            assert var in p.global_args, f"FROM uses ${var}, which is not a global ARG"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **IDS)
def test_base_images_pinned_by_tag_and_digest(dockerfile: Path) -> None:
    p = parse(dockerfile)
    for stage in p.stages:
        ref = resolve(
            stage.base, {**p.global_args, **dict.fromkeys(REQUIRED_ARGS & set(p.global_args), PLACEHOLDER_DIGEST)}
        )
        assert PINNED.match(ref), f"FROM {stage.base} resolves to {ref!r}: not name:tag@sha256:<64 hex>"


def _dockerignore_rules(dockerfile: Path) -> list[tuple[bool, str]]:
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.is_file(), f"{ignore} is missing: the build would send the whole repo (with .work/) as context"
    rules = []
    for raw in ignore.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!").rstrip("/")))
    return rules


def _matches(pattern: str, path: str) -> bool:
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]  # the path and its parent dirs
    if pattern.startswith("**/"):
        sub = pattern[3:]
        return any(fnmatch.fnmatchcase(parts[i], sub) for i in range(len(parts)))
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def in_context(rules: list[tuple[bool, str]], path: str) -> bool:
    included = True
    for negated, pattern in rules:  # Docker semantics: the last matching rule wins
        if _matches(pattern, path):
            included = negated
    return included


NEEDED = re.compile(r"(\.py|\.json|\.patch|\.lock|\.toml|\.sh|/series)$")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **IDS)
def test_copy_sources_exist_and_are_in_the_context(dockerfile: Path) -> None:
    p = parse(dockerfile)
    rules = _dockerignore_rules(dockerfile)
    copies = 0
    for stage in p.stages:
        for ins in stage.instructions:
            if ins["instruction"] not in ("COPY", "ADD"):
                continue
            tokens = shlex.split(ins["value"])
            if any(t.startswith("--from") for t in tokens):
                continue
            for src in [t for t in tokens if not t.startswith("--")][:-1]:
                copies += 1
                path = REPO / src
                assert path.exists(), f"COPY source {src} does not exist in the repository"
                files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
                needed = [
                    str(f.relative_to(REPO))
                    for f in files
                    if NEEDED.search(str(f)) and "__pycache__" not in f.parts and ".egg-info" not in str(f)
                ]
                assert needed, f"COPY {src}: nothing the image needs is under it"
                dropped = [f for f in needed if not in_context(rules, f)]
                assert dropped == [], f"COPY {src}: excluded by the .dockerignore: {dropped}"
    assert copies


def test_dockerignore_emulation_excludes_the_work_dir() -> None:
    rules = _dockerignore_rules(DOCKER / "vllm-rocm" / "Dockerfile")
    assert not in_context(rules, ".work/venv/bin/python")
    assert not in_context(rules, "patches/src/vllm_rocm_patches/__pycache__/cli.cpython-311.pyc")
    assert in_context(rules, "patches/vllm-0.10.2/series")


def _labels(p: Parsed) -> dict[str, str]:
    labels: dict[str, str] = {}
    for ins in p.stages[-1].instructions:
        if ins["instruction"] == "LABEL":
            for tok in shlex.split(ins["value"]):
                key, _, val = tok.partition("=")
                labels[key] = val
    return labels


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **IDS)
def test_labels(dockerfile: Path) -> None:
    p = parse(dockerfile)
    labels = _labels(p)
    want = OCI_LABELS | (VLLM_LABELS if dockerfile in VLLM_DOCKERFILES else set())
    assert want <= set(labels), f"missing labels: {sorted(want - set(labels))}"
    values = stage_values(p, p.stages[-1])
    assert resolve(labels["org.opencontainers.image.base.name"], values) + "@" + resolve(
        labels["org.opencontainers.image.base.digest"], values
    ) == resolve(p.stages[-1].base, p.global_args), "the base labels must name the image FROM pulls"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, **IDS)
def test_runs_as_numeric_non_root_user(dockerfile: Path) -> None:
    p = parse(dockerfile)
    users = [i["value"] for i in p.stages[-1].instructions if i["instruction"] == "USER"]
    assert users, "the final stage sets no USER (it would run as root)"
    uid = resolve(users[-1], stage_values(p, p.stages[-1])).split(":")[0]
    assert uid.isdigit() and int(uid) > 0, f"USER {users[-1]} -> {uid!r}: must be a numeric non-root uid"


@pytest.mark.parametrize("dockerfile", VLLM_DOCKERFILES, **IDS)
def test_vllm_image_runtime(dockerfile: Path) -> None:
    p = parse(dockerfile)
    final = p.stages[-1]
    # the documented ROCm defaults are set, each ENV right below a comment saying why
    for name in ("HIP_FORCE_DEV_KERNARG", "TORCH_BLAS_PREFER_HIPBLASLT", "VLLM_ROCM_USE_AITER"):
        assert name in final.env, f"{name} is not set"
    for ins in final.instructions:
        if ins["instruction"] == "ENV":
            above = p.lines[ins["startline"] - 1].strip()
            assert above.startswith("#"), f"line {ins['startline'] + 1}: ENV without a comment above it"
    runs = " ".join(i["value"] for i in final.instructions if i["instruction"] == "RUN")
    assert "/opt/vllm-rocm/bin/apply-patches.sh --python" in runs and "--out-dir /opt/vllm-rocm" in runs
    for flag in ("--expect-release", "--expect-patch-level", "--expect-series-sha256"):
        assert flag in runs, f"the build-time self-test does not check {flag}"
    entry = [i["value"] for i in final.instructions if i["instruction"] == "ENTRYPOINT"]
    assert entry == ['["/opt/vllm-rocm/bin/vllm-serve.sh"]']
    assert "8000" in [i["value"] for i in final.instructions if i["instruction"] == "EXPOSE"]


@pytest.mark.parametrize("dockerfile", VLLM_DOCKERFILES, **IDS)
def test_vllm_tools_stage_builds_the_sidecars_wheel(dockerfile: Path) -> None:
    """The vLLM images' `vllm-rocm` is the product wheel the sidecar image installs: the tools stage (the first) is
    FROM the same pinned python as docker/health/Dockerfile, COPYs exactly what its build stage COPYs (the list
    tests/support/product_wheel.py builds tests/test_packaging.py's wheel from) and builds it the same way, with the
    same hash-locked build tools."""
    p, health = parse(dockerfile), parse(DOCKER / "health" / "Dockerfile")
    tools = p.stages[0]
    assert tools.base == health.stages[0].base == "${PYTHON_IMAGE}@${PYTHON_DIGEST}"
    assert "AS tools" in p.lines[[i for i, line in enumerate(p.lines) if line.startswith("FROM ")][0]]
    for arg in ("PYTHON_IMAGE", "PYTHON_DIGEST"):
        assert p.global_args[arg] == health.global_args[arg], f"{arg}: not docker/health/Dockerfile's pin"
    assert product_wheel.build_stage_sources(dockerfile) == product_wheel.build_stage_sources()
    copies = [i["value"] for i in tools.instructions if i["instruction"] == "COPY"]
    assert "docker/health/build-requirements.lock ./" in copies
    runs = " ".join(i["value"] for i in tools.instructions if i["instruction"] == "RUN")
    assert runs.count("--require-hashes") == 2 and "-r build-requirements.lock" in runs
    assert "pip wheel --no-deps --no-build-isolation --wheel-dir /build/dist ." in runs


@pytest.mark.parametrize("dockerfile", VLLM_DOCKERFILES, **IDS)
def test_vllm_image_installs_vllm_rocm_into_vllms_python(dockerfile: Path) -> None:
    """The final stage installs the tools stage's wheel into VLLM_PYTHON offline, without dependencies (qualify's
    third-party imports are vLLM's own), and the same RUN fails the build unless `vllm-rocm qualify run` parses and
    the qualification runner imports; the label names the version the build checked."""
    p = parse(dockerfile)
    final = p.stages[-1]
    copies = [i["value"] for i in final.instructions if i["instruction"] == "COPY"]
    assert "--from=tools /build/dist/ /tmp/vllm-rocm-tools/" in copies
    [run] = [i["value"] for i in final.instructions if i["instruction"] == "RUN" and "vllm_rocm_dist-" in i["value"]]
    run = " ".join(run.split())
    assert '"${VLLM_PYTHON}" "$1/pip" install --no-deps --no-index' in run
    for check in (
        "vllm-rocm qualify run --help >/dev/null",
        '"${VLLM_PYTHON}" -c "import vllm_rocm_qualify.runner"',
        '= "${TOOLS_VERSION}"',
        '"$(dirname "$(command -v vllm-rocm)")" = "$(dirname "$(command -v vllm)")"',
    ):
        assert check in run, f"the build-time self-test does not run {check}"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert final.args["TOOLS_VERSION"] == version, "TOOLS_VERSION's default is pyproject.toml's version"
    assert _labels(p)["io.vllm-rocm.tools"] == "vllm-rocm ${TOOLS_VERSION}"


def test_source_build_patches_the_source_tree_before_building() -> None:
    p = parse(DOCKER / "vllm-rocm" / "Dockerfile.source")
    build = p.stages[1]  # after the tools stage
    runs = [i["value"] for i in build.instructions if i["instruction"] == "RUN"]
    fetch = next(i for i, r in enumerate(runs) if "pip download --no-deps --no-binary :all:" in r)
    patch = next(i for i, r in enumerate(runs) if "apply-patches.sh --target /src/vllm --release" in r)
    wheel = next(i for i, r in enumerate(runs) if "setup.py bdist_wheel" in r)
    assert fetch < patch < wheel
    assert "sha256sum --check" in runs[fetch]
    assert "PYTORCH_ROCM_ARCH" in runs[wheel]
    assert "gfx942" in (build.args.get("PYTORCH_ROCM_ARCH") or "")


def test_health_image_runtime() -> None:
    p = parse(DOCKER / "health" / "Dockerfile")
    assert len(p.stages) == 2, "builder + runtime"
    final = p.stages[-1]
    values = {i["instruction"]: i["value"] for i in final.instructions}
    assert values["ENTRYPOINT"] == '["vllm-rocm-health", "serve"]'
    assert values["EXPOSE"] == "9400"
    assert "HEALTHCHECK" in values
    copies = [i["value"] for i in final.instructions if i["instruction"] == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"], "the runtime stage copies only the venv"
    # The known-issues data comes with the wheel (package data), not from a path an environment variable names.
    assert "VLLM_ROCM_KNOWN_ISSUES" not in values["ENV"]
    runs = " ".join(i["value"] for i in final.instructions if i["instruction"] == "RUN")
    assert "pip uninstall" in runs and "setuptools" in runs, "no installer/build tools left in the runtime"
    build_runs = " ".join(i["value"] for i in p.stages[0].instructions if i["instruction"] == "RUN")
    assert "--require-hashes" in build_runs and "venv --without-pip /opt/venv" in build_runs


def _defaults(path: Path) -> dict[str, str | None]:
    p = parse(path)
    values = dict(p.global_args)
    for stage in p.stages:
        values.update({k: v for k, v in stage.args.items() if v is not None})
    return values


def test_prebuilt_defaults_match_the_matrix() -> None:
    default, specs = gen_bake.load_matrix()
    spec = next(s for s in specs if s.release == default)
    assert spec.build == "prebuilt", "the Dockerfile's defaults describe the matrix's default release"
    d = _defaults(DOCKER / "vllm-rocm" / "Dockerfile")
    assert (d["BASE_IMAGE"], d["BASE_DIGEST"], d["VLLM_RELEASE"]) == (spec.base_image, spec.base_digest, default)
    assert (d["PATCH_LEVEL"], d["PATCH_SERIES"], d["PATCH_SERIES_SHA256"]) == (
        str(spec.patch_level),
        spec.series_id,
        spec.series_sha256,
    )


def test_source_defaults_match_the_series_and_pypi_hash() -> None:
    _default, specs = gen_bake.load_matrix()
    d = _defaults(DOCKER / "vllm-rocm" / "Dockerfile.source")
    spec = next(s for s in specs if s.release == d["VLLM_REF"])
    assert d["VLLM_SDIST_SHA256"] == spec.sdist_sha256
    assert (d["PATCH_LEVEL"], d["PATCH_SERIES"], d["PATCH_SERIES_SHA256"]) == (
        str(spec.patch_level),
        spec.series_id,
        spec.series_sha256,
    )
