"""docker/docker-bake.hcl is generated from releases.json and patches/ and must be up to date; each image
tag says the release and its patch level (p<N> = the patches listed in patches/vllm-<release>/series)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.docker.conftest import DOCKER, REPO
from tests.support.vllm_releases import SUPPORTED_VERSIONS

BAKE = DOCKER / "docker-bake.hcl"
GEN = DOCKER / "scripts" / "gen_bake.py"
TARGET = re.compile(r'^target "([^"]+)" \{\n(.*?)^\}', re.S | re.M)


def targets() -> dict[str, str]:
    return dict(TARGET.findall(BAKE.read_text()))


def arg(body: str, name: str) -> str | None:
    m = re.search(rf"^\s+{name}\s+=\s+(\S+)$", body, re.M)
    return m.group(1).strip('"') if m else None


def quilt_count(release: str) -> int:
    """Patches in the quilt series file, read independently of the patch tool."""
    lines = (REPO / "patches" / f"vllm-{release}" / "series").read_text().splitlines()
    return sum(1 for line in lines if line.split("#", 1)[0].strip())


def test_bake_file_is_up_to_date() -> None:
    res = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_check_detects_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "docker-bake.hcl"
    stale.write_text(BAKE.read_text().replace("-p3", "-p9"))
    res = subprocess.run(
        [sys.executable, str(GEN), "--check", "--out", str(stale)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 1 and "stale" in res.stderr


def test_every_supported_release_has_an_image_tagged_release_and_patch_level() -> None:
    found = targets()
    for release in SUPPORTED_VERSIONS:
        body = found[f"vllm-rocm-{release.replace('.', '_')}"]
        assert f'tags = ["${{REGISTRY}}vllm-rocm:{release}-p{quilt_count(release)}"]' in body
        assert arg(body, "PATCH_LEVEL") == str(quilt_count(release))
        assert arg(body, "PATCH_SERIES") == f"vllm-{release}"
        assert (arg(body, "VLLM_RELEASE") or arg(body, "VLLM_REF")) == release
        digest = arg(body, "BASE_DIGEST")
        assert digest and (re.fullmatch(r"sha256:[0-9a-f]{64}", digest) or re.fullmatch(r"BASE_DIGEST_\w+", digest))
    assert "vllm-rocm-health" in found


def test_matrix_and_bake_agree_on_bases_and_build_paths() -> None:
    matrix = json.loads((DOCKER.parent / "releases.json").read_text())
    found = targets()
    dockerfile = {"prebuilt": "docker/vllm-rocm/Dockerfile", "source": "docker/vllm-rocm/Dockerfile.source"}
    for row in matrix["releases"]:
        body = found[f"vllm-rocm-{row['release'].replace('.', '_')}"]
        assert arg(body, "BASE_IMAGE") == row["base_image"]
        assert arg(body, "BASE_DIGEST") == (row["base_digest"] or row["digest_variable"])
        assert f'dockerfile = "{dockerfile[row["build"]]}"' in body
        if row["build"] == "source":
            assert arg(body, "VLLM_SDIST_SHA256") == row["sdist_sha256"]
        if not row["base_digest"]:  # an unverifiable digest must be a declared (required) variable
            assert f'variable "{row["digest_variable"]}"' in BAKE.read_text()


def test_health_tag_is_the_project_version() -> None:
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    body = targets()["vllm-rocm-health"]
    assert f'tags = ["${{REGISTRY}}vllm-rocm-health:{version}"]' in body
    assert 'dockerfile = "docker/health/Dockerfile"' in body
