"""Load the series directory: `index.json` (what is known about each fix), one `vllm-<release>/` per release.

A release directory holds a quilt `series` file (patch names in order, `#` comments), the `*.patch` files
with DEP-3 headers, and `series.json` (machine-readable: targets, pristine/patched sha256, post-conditions).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dep3, unidiff
from .errors import SeriesError

ENV_SERIES_DIR = "VLLM_ROCM_PATCHES_DIR"
ENTRY_STATES = ("patch", "fixed-upstream", "not-needed")


def default_series_dir() -> Path:
    """$VLLM_ROCM_PATCHES_DIR, else the installed wheel's series (package data `data/`, which pyproject.toml maps to
    the repository's patches/), else this package's own checkout (patches/src/vllm_rocm_patches -> patches/)."""
    env = os.environ.get(ENV_SERIES_DIR)
    if env:
        return Path(env)
    packaged = importlib.resources.files(__package__ or "vllm_rocm_patches") / "data"
    if isinstance(packaged, Path) and (packaged / "index.json").is_file():
        return packaged
    return Path(__file__).resolve().parents[2]


@dataclass
class Fix:
    id: str
    title: str
    # How a release the series does not know is classified by what its file declares (optional: only fixes
    # whose effect shows in one class attribute have it).
    file: str = ""
    cls: str = ""
    attributes: list[str] = field(default_factory=list)
    content_states: dict[str, dict[str, str]] = field(default_factory=dict)
    upstream_states: list[dict[str, Any]] = field(default_factory=list)

    @property
    def classifies_content(self) -> bool:
        return bool(self.file and self.cls and self.attributes and self.content_states)


@dataclass
class Entry:
    """One line of a release's plan: a patch to apply, or a record that the fix is upstream / not needed."""

    fix: str
    state: str  # one of ENTRY_STATES
    files: dict[str, dict[str, str]]  # path -> {"pristine_sha256", ["patched_sha256"]}
    postconditions: list[dict[str, Any]]
    patch_name: str | None = None
    targets: list[str] = field(default_factory=list)
    upstream: str = ""
    evidence: dict[str, str] = field(default_factory=dict)
    file_patches: list[unidiff.FilePatch] = field(default_factory=list)
    header: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.patch_name or f"{self.fix} ({self.state})"


@dataclass
class ReleaseSeries:
    release: str
    directory: Path
    entries: list[Entry]
    sha256: str = ""  # over index.json and this release's files, as loaded
    # other releases this series serves, each with why (series.json "covers"): releases whose files the series
    # touches are byte-identical to this one's. The pristine sha256 pins still decide at run time.
    covers: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.directory.name


@dataclass
class SeriesSet:
    root: Path
    fixes: dict[str, Fix]
    releases: dict[str, ReleaseSeries]
    sha256: str  # over index.json and every release directory's files: what the image build records

    def series_sha256(self, release: str) -> str:
        return self.releases[release].sha256

    def find(self, release: str) -> tuple[ReleaseSeries | None, str]:
        """The series that serves `release`, and why: its own, or another one's that covers it."""
        if release in self.releases:
            return self.releases[release], f"the series for vLLM {release}"
        for rs in self.releases.values():
            if release in rs.covers:
                return rs, f"covers vLLM {release}: {rs.covers[release]}"
        return None, ""


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SeriesError(f"series file missing: {path}") from None
    except json.JSONDecodeError as exc:
        raise SeriesError(f"{path}: invalid JSON: {exc}") from None


def read_series_file(path: Path) -> list[str]:
    """Patch names in a quilt `series` file (comments and blanks dropped, options other than -p1 refused)."""
    names = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) > 1 and parts[1:] != ["-p1"]:
            raise SeriesError(f"{path}: only -p1 patches are supported: {raw!r}")
        names.append(parts[0])
    return names


def _release_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.iterdir() if p.is_file() and (p.name in ("series", "series.json") or p.suffix == ".patch")
    )


def _hash_files(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).hexdigest().encode() + b"\n")
    return h.hexdigest()


def _load_fixes(root: Path) -> dict[str, Fix]:
    index = _load_json(root / "index.json")
    fixes = {}
    for raw in index.get("fixes", []):
        try:
            fixes[raw["id"]] = Fix(
                raw["id"],
                raw.get("title", ""),
                raw.get("file", ""),
                raw.get("class", ""),
                list(raw.get("attributes", [])),
                dict(raw.get("content_states", {})),
                list(raw.get("upstream_states", [])),
            )
        except KeyError as exc:
            raise SeriesError(f"{root / 'index.json'}: fix is missing key {exc}") from None
    return fixes


def _load_release(directory: Path, fixes: dict[str, Fix]) -> ReleaseSeries:
    meta_path = directory / "series.json"
    meta = _load_json(meta_path)
    release = str(meta.get("release", ""))
    if directory.name != f"vllm-{release}":
        raise SeriesError(f"{meta_path}: release {release!r} does not match the directory name {directory.name!r}")
    listed = read_series_file(directory / "series") if (directory / "series").is_file() else None
    if listed is None:
        raise SeriesError(f"{directory}: no quilt 'series' file")
    entries = []
    for raw in meta.get("entries", []):
        entry = _load_entry(raw, directory, meta_path, fixes)
        if entry.state == "patch" and release not in entry.targets:
            raise SeriesError(f"{meta_path}: {entry.id} targets {entry.targets}, not this release {release}")
        entries.append(entry)
    _check_chains(entries, meta_path)
    in_meta = [e.patch_name for e in entries if e.patch_name]
    if in_meta != listed:
        raise SeriesError(f"{directory}: 'series' lists {listed} but series.json describes {in_meta}")
    sha = _hash_files(directory.parent, [directory.parent / "index.json", *_release_files(directory)])
    covers = meta.get("covers", {})
    if not isinstance(covers, dict) or not all(isinstance(v, str) and v for v in covers.values()):
        raise SeriesError(f"{meta_path}: 'covers' must map each release to why this series serves it")
    return ReleaseSeries(release, directory, entries, sha, {str(k): v for k, v in covers.items()})


def _check_chains(entries: list[Entry], meta_path: Path) -> None:
    """Patches of one release may touch the same file (stacked, quilt-style): each one's pristine hash must then
    be the previous one's patched hash, so every on-disk state of the file names how far the stack is applied.
    A fixed-upstream / not-needed record shares its file with nothing."""
    last: dict[str, tuple[str, str]] = {}  # file -> (entry id, hash after it)
    records: dict[str, str] = {}
    for e in entries:
        for path, hashes in e.files.items():
            if e.state != "patch" or path in records:
                other = records.get(path) or (last[path][0] if path in last else None)
                if other is not None:
                    raise SeriesError(
                        f"{meta_path}: {path} is used by both {other} and {e.id}; a record entry"
                        " shares its file with nothing"
                    )
                records[path] = e.id
                continue
            if path in last and hashes["pristine_sha256"] != last[path][1]:
                raise SeriesError(
                    f"{meta_path}: {e.id} expects {path} with sha256 {hashes['pristine_sha256']}, but the patch"
                    f" before it ({last[path][0]}) leaves {last[path][1]}: stacked patches must chain"
                )
            last[path] = (e.id, hashes["patched_sha256"])


def file_chains(entries: list[Entry]) -> dict[str, list[str]]:
    """file -> [hash before the first patch touching it, hash after each such patch in series order]."""
    chains: dict[str, list[str]] = {}
    for e in entries:
        if e.state != "patch":
            continue
        for path, hashes in e.files.items():
            chains.setdefault(path, [hashes["pristine_sha256"]]).append(hashes["patched_sha256"])
    return chains


def _load_entry(raw: dict[str, Any], directory: Path, meta_path: Path, fixes: dict[str, Fix]) -> Entry:
    try:
        entry = Entry(
            fix=raw["fix"],
            state=raw["state"],
            files=dict(raw["files"]),
            postconditions=list(raw["postconditions"]),
            patch_name=raw.get("patch"),
            targets=list(raw.get("targets", [])),
            upstream=raw.get("upstream", ""),
            evidence=dict(raw.get("evidence", {})),
        )
    except KeyError as exc:
        raise SeriesError(f"{meta_path}: entry is missing key {exc}") from None
    if entry.fix not in fixes:
        raise SeriesError(f"{meta_path}: unknown fix {entry.fix!r} (not in index.json)")
    if entry.state not in ENTRY_STATES:
        raise SeriesError(f"{meta_path}: state {entry.state!r} is not one of {ENTRY_STATES}")
    for path, hashes in entry.files.items():
        if "pristine_sha256" not in hashes or (entry.state == "patch" and "patched_sha256" not in hashes):
            raise SeriesError(f"{meta_path}: {path}: pristine_sha256 (and patched_sha256 for patches) required")
    if entry.state == "patch":
        if not entry.patch_name:
            raise SeriesError(f"{meta_path}: a 'patch' entry needs a 'patch' file name")
        patch_path = directory / entry.patch_name
        if not patch_path.is_file():
            raise SeriesError(f"{meta_path}: patch file {patch_path} is missing")
        text = patch_path.read_text(encoding="utf-8")
        entry.header = dep3.parse_header(text)
        entry.file_patches = unidiff.parse(text, str(patch_path))
        touched = sorted(fp.path for fp in entry.file_patches)
        if touched != sorted(entry.files):
            raise SeriesError(f"{patch_path}: touches {touched} but series.json pins hashes for {sorted(entry.files)}")
    return entry


def load(root: Path) -> SeriesSet:
    root = Path(root)
    if not (root / "index.json").is_file():
        raise SeriesError(
            f"{root} is not a series directory (no index.json); pass --series-dir or set {ENV_SERIES_DIR}"
        )
    fixes = _load_fixes(root)
    releases = {}
    for d in sorted(root.glob("vllm-*")):
        if d.is_dir():
            rs = _load_release(d, fixes)
            releases[rs.release] = rs
    covered: dict[str, str] = {}
    for rs in releases.values():
        for rel in rs.covers:
            if rel in releases or rel in covered:
                other = f"vllm-{rel}/" if rel in releases else covered[rel]
                raise SeriesError(f"{rs.directory / 'series.json'}: covers {rel}, which {other} already serves")
            covered[rel] = rs.id
    all_files = [root / "index.json"] + [f for rs in releases.values() for f in _release_files(rs.directory)]
    return SeriesSet(root, fixes, releases, _hash_files(root, all_files))


def load_patch_ref(sset: SeriesSet, ref: str) -> list[unidiff.FilePatch]:
    """Parse a patch named relative to the series root (e.g. `vllm-0.10.2/0001-x.patch`), used as evidence."""
    path = sset.root / ref
    if not path.is_file():
        raise SeriesError(f"evidence patch {path} is missing")
    return unidiff.parse(path.read_text(encoding="utf-8"), str(path))
