"""The release registry, releases.json at the repository root: the one list of the vLLM releases this distribution
supports (a row each: its image build, its series patches/vllm-<release>/), the default release, and the releases it
has checked. The generators (`vllm_rocm_stack.generate`), the image builder, the tests and `make new-release` read it
through `load()`; the bake file's generator (docker/scripts/gen_bake.py, a script) reads the same file.

`load()` refuses a registry that contradicts itself (a default that is no row, a newest-checked release that is not
the newest checked one, unsorted or duplicate releases), so every reader can trust it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_rocm_known_issues.pep440 import Version

from .config import REPO

PATH = REPO / "releases.json"


class RegistryError(ValueError):
    """releases.json is malformed or contradicts itself."""


def _sorted(versions: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(versions, key=Version.parse))


@dataclass(frozen=True)
class Registry:
    path: Path
    default: str  # the one default release (images, compose, the chart, `make run`)
    newest_checked: str  # the newest vLLM release whose files this project read
    rows: tuple[dict[str, Any], ...]  # one per supported release, oldest first
    also_checked: tuple[str, ...]  # releases beyond the supported ones whose files the tests read
    unknown_to_the_series: tuple[str, ...]  # releases the patch tool's tests use as ones without a series
    examples: tuple[str, ...]  # real releases the known-issues example configurations pick from, in order

    @property
    def supported(self) -> tuple[str, ...]:
        return tuple(r["release"] for r in self.rows)

    @property
    def checked(self) -> tuple[str, ...]:
        """Every release whose files the tests read: the supported ones and the others checked, oldest first."""
        return _sorted(list({*self.supported, *self.also_checked}))

    def row(self, release: str) -> dict[str, Any]:
        for r in self.rows:
            if r["release"] == release:
                return r
        raise RegistryError(f"{self.path}: no row for vLLM {release} (supported: {', '.join(self.supported)})")

    def previous(self, release: str) -> str | None:
        """The newest supported release older than `release` (what a new release is compared with)."""
        older = [r for r in self.supported if Version.parse(r) < Version.parse(release)]
        return older[-1] if older else None


def load(path: Path = PATH) -> Registry:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RegistryError(f"{path}: cannot read: {e}") from e
    rows = tuple(data["releases"])
    supported = [r["release"] for r in rows]
    checked = data.get("checked", {})
    reg = Registry(
        path=path,
        default=data["default_release"],
        newest_checked=data["newest_checked"],
        rows=rows,
        also_checked=tuple(checked.get("also", ())),
        unknown_to_the_series=tuple(checked.get("unknown_to_the_series", ())),
        examples=tuple(checked.get("examples", ())),
    )
    if list(_sorted(supported)) != supported or len(set(supported)) != len(supported):
        raise RegistryError(f"{path}: releases must be unique and oldest first: {supported}")
    if reg.default not in supported:
        raise RegistryError(f"{path}: default_release {reg.default} is not a row")
    if reg.row(reg.default)["build"] != "prebuilt":
        raise RegistryError(
            f"{path}: default_release {reg.default} must be built 'prebuilt' (the Dockerfile's defaults)"
        )
    if reg.newest_checked != reg.checked[-1]:
        raise RegistryError(
            f"{path}: newest_checked {reg.newest_checked} is not the newest checked release ({reg.checked[-1]})"
        )
    if set(reg.unknown_to_the_series) & set(supported) or not set(reg.unknown_to_the_series) <= set(reg.checked):
        raise RegistryError(f"{path}: checked.unknown_to_the_series must be checked releases without a row")
    return reg


def image_tag(release: str, root: Path = REPO) -> str:
    """`vllm-rocm:<release>-p<N>`, N the patch level of the release's series (as the bake file tags it)."""
    from .generate import gen_bake  # the one implementation of the tag, docker/scripts/gen_bake.py

    _default, specs = gen_bake().load_matrix(root / "releases.json", root / "patches")
    spec = next((s for s in specs if s.release == release), None)
    if spec is None:
        raise RegistryError(f"{root / 'releases.json'}: no row for vLLM {release}")
    return f"vllm-rocm:{spec.tag}"
