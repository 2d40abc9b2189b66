"""Audit the known-issues data against the code of every vLLM release: the code facts its rows' bounds rest on.

A row of known-issues/known-issues.json may carry a `code_condition`: the code probes (named in the file's
`code_probes`: a regular expression over the files of a release) that must be present or absent for the bug to be
possible, and how the row's `vllm` bounds relate to the releases where that holds: `exact` (the same releases; the
probes are the bug and its fix; `together_with` other rows when one code fact spans two ranges), `within` (the code
is necessary, the reports narrow it further) or `covers` (the bounds are wider, e.g. a report from a dev build of a
branch image).

This tool reads the released wheels (Python files only, vllm_wheels.py) of every final vLLM release from
OLDEST_RELEASE to the data's `releases_checked_up_to` and writes, per release, where each probe matches
(file:line, or null): known-issues/code-facts.json, committed. The unit tests (tests/known_issues/
test_code_facts.py) check every row's bounds against that file without any download, so a row whose bounds
disagree with the code fails a test; `--check` re-derives the facts from the wheels and fails when the committed
file is stale (a probe changed, a release was added).

    python -m vllm_rocm_stack.known_issues_audit --write       # fetch the releases, rewrite code-facts.json
    python -m vllm_rocm_stack.known_issues_audit --check       # re-derive from the wheels; exit 1 when stale
    python -m vllm_rocm_stack.known_issues_audit --report      # per row: releases the code allows vs the bounds
    python -m vllm_rocm_stack.known_issues_audit --grep 'cudagraph_support = ' --files '*/rocm_attn.py'

The first run downloads 40 wheels (0.10.0-0.34.0, ~13 GB in all, one at a time, each deleted once its Python files
are out; ~15 min here; the cache is 1.2 GB under $VLLM_ROCM_WORK/cache/vllm-py); later runs read the cache (~8 s).
`--check` also says when PyPI has releases newer than the data's releases_checked_up_to.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import logging
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_rocm_known_issues.pep440 import SpecifierSet, Version

from . import vllm_wheels
from .config import REPO

log = logging.getLogger(__name__)

DATA = "known-issues/known-issues.json"
FACTS = "known-issues/code-facts.json"
# The oldest release the rows are checked against: 0.10.0, the oldest the patch tool and the chart's guard tests read
# (it predates cudagraph_mode); the audit of issue 34 covered 0.10.0 .. 0.34.0.
OLDEST_RELEASE = "0.10.0"
GENERATED_BY = "python -m vllm_rocm_stack.known_issues_audit --write"


class AuditError(RuntimeError):
    """The data's probes or the facts file cannot be used."""


@dataclass(frozen=True)
class Probe:
    """A code fact: the first match of `pattern` (re.MULTILINE) in the files matching any of `files`."""

    id: str
    files: tuple[str, ...]
    pattern: str
    what: str

    def find(self, tree: Path, names: list[str]) -> str | None:
        """`path:line` of the first match in `tree` (files in sorted order), or None."""
        regex = re.compile(self.pattern, re.MULTILINE)
        for name in names:
            if not any(fnmatch.fnmatchcase(name, pat) for pat in self.files):
                continue
            text = (tree / name).read_text(encoding="utf-8", errors="replace")
            m = regex.search(text)
            if m:
                return f"{name}:{text.count(chr(10), 0, m.start()) + 1}"
        return None


def load_data(root: Path = REPO) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / DATA).read_text(encoding="utf-8"))
    return data


def probes(data: dict[str, Any]) -> dict[str, Probe]:
    out = {}
    for pid, raw in (data.get("code_probes") or {}).items():
        try:
            re.compile(raw["pattern"], re.MULTILINE)
        except re.error as exc:
            raise AuditError(f"code probe {pid}: bad pattern: {exc}") from None
        out[pid] = Probe(pid, tuple(raw["files"]), raw["pattern"], raw.get("what", ""))
    return out


def probes_digest(data: dict[str, Any]) -> str:
    """sha256 of the probe definitions: a facts file made from other definitions is stale."""
    canonical = json.dumps(data.get("code_probes") or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def releases_to_check(data: dict[str, Any], available: Iterable[str]) -> list[str]:
    """Every final release on the index from OLDEST_RELEASE to the data's releases_checked_up_to, oldest first."""
    lo, hi = Version.parse(OLDEST_RELEASE), Version.parse(data["releases_checked_up_to"])
    chosen = sorted({v for v in available if lo <= Version.parse(v) <= hi}, key=Version.parse)
    if not chosen or chosen[-1] != data["releases_checked_up_to"]:
        raise AuditError(f"releases_checked_up_to {data['releases_checked_up_to']} is not a release on the index")
    return chosen


def python_files(tree: Path) -> list[str]:
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*.py"))


def derive(data: dict[str, Any], releases: list[str], cache: Path | None = None) -> dict[str, Any]:
    """The facts file's content, read from the wheels of `releases`."""
    found: dict[str, Any] = {}
    all_probes = probes(data)
    for version in releases:
        tree = vllm_wheels.python_tree(version, cache)
        names = python_files(tree)
        found[version] = {
            **vllm_wheels.provenance(tree),
            "probes": {pid: p.find(tree, names) for pid, p in sorted(all_probes.items())},
        }
        log.info(
            "%s: %d of %d probes found",
            version,
            sum(1 for v in found[version]["probes"].values() if v),
            len(all_probes),
        )
    return {
        "comment": (
            "GENERATED by `" + GENERATED_BY + "` from the released vLLM wheels on PyPI (Python files only) and the "
            "code_probes of known-issues.json: per release, where each probe matches (file:line) or null. "
            "tests/known_issues/test_code_facts.py checks every row's code_condition against it; "
            "`--check` re-derives it from the wheels."
        ),
        "oldest_release": OLDEST_RELEASE,
        "releases_checked_up_to": data["releases_checked_up_to"],
        "probes_sha256": probes_digest(data),
        "releases": found,
    }


def render(facts: dict[str, Any]) -> str:
    return json.dumps(facts, indent=1, sort_keys=False) + "\n"


# --- judging the rows against the facts -----------------------------------------------------------------------------


def condition_holds(condition: dict[str, Any], found: dict[str, str | None]) -> bool:
    return all(found.get(p) for p in condition.get("present", [])) and not any(
        found.get(p) for p in condition.get("absent", [])
    )


def _admits(rows: list[dict[str, Any]], version: str) -> bool:
    return any(SpecifierSet(r["affects"]["vllm"]).contains(version) for r in rows)


def disagreements(row: dict[str, Any], facts: dict[str, Any], data: dict[str, Any] | None = None) -> list[str]:
    """What is wrong with one row's `vllm` bounds given the facts (empty: they agree), per its code_condition:
    `exact` the releases the bounds admit are those where the condition holds (with `together_with`: the union of
    this row's and those rows' releases), `within` they are among them, `covers` they include them all."""
    condition = row.get("code_condition")
    if not condition:
        return []
    group = [row]
    for other_id in condition.get("together_with", []):
        other = next((r for r in (data or {}).get("issues", []) if r["id"] == other_id), None)
        if other is None:
            return [f"together_with names {other_id!r}, which is not a row"]
        group.append(other)
    spec = " or ".join(r["affects"]["vllm"] for r in group)
    out = []
    for version, entry in facts["releases"].items():
        holds = condition_holds(condition, entry["probes"])
        admitted = _admits(group, version)
        own = _admits([row], version)
        if own and not holds and condition["bounds"] in ("exact", "within"):
            why = _evidence(condition, entry)
            out.append(f"{version}: inside {row['affects']['vllm']} but the code condition does not hold ({why})")
        elif holds and not admitted and condition["bounds"] in ("exact", "covers"):
            out.append(f"{version}: the code condition holds ({_evidence(condition, entry)}) but {spec} excludes it")
    return out


def _evidence(condition: dict[str, Any], entry: dict[str, Any]) -> str:
    parts = [
        f"{p} {'at ' + entry['probes'][p] if entry['probes'].get(p) else 'absent'}"
        for p in condition.get("present", [])
    ]
    parts += [
        f"no {p}" if not entry["probes"].get(p) else f"{p} at {entry['probes'][p]}" for p in condition.get("absent", [])
    ]
    return "; ".join(parts)


def consistency(data: dict[str, Any], facts: dict[str, Any]) -> list[str]:
    """Problems of the committed pair (data, facts) that need no download."""
    problems = []
    if facts.get("probes_sha256") != probes_digest(data):
        problems.append(f"{FACTS} was made from other code_probes than known-issues.json has: run `{GENERATED_BY}`")
    if facts.get("releases_checked_up_to") != data["releases_checked_up_to"]:
        newest = facts.get("releases_checked_up_to")
        problems.append(f"{FACTS} covers up to {newest}, the data says {data['releases_checked_up_to']}")
    releases = list(facts.get("releases", {}))
    if not releases or releases[0] != OLDEST_RELEASE or releases[-1] != data["releases_checked_up_to"]:
        problems.append(f"{FACTS} must cover {OLDEST_RELEASE} .. {data['releases_checked_up_to']}")
    known = set(data.get("code_probes") or {})
    used: set[str] = set()
    for row in data["issues"]:
        condition = row.get("code_condition")
        if not condition:
            continue
        names = set(condition.get("present", [])) | set(condition.get("absent", []))
        used |= names
        if names - known:
            problems.append(f"{row['id']}: code_condition names unknown probes {sorted(names - known)}")
    if known - used:
        problems.append(f"code_probes used by no row (delete them): {sorted(known - used)}")
    for version, entry in facts.get("releases", {}).items():
        if set(entry.get("probes", {})) != known:
            problems.append(f"{FACTS} {version}: probes differ from code_probes: run `{GENERATED_BY}`")
    return problems


def _ranges(releases: list[str], marks: list[bool]) -> str:
    """`0.12.0-0.17.1, 0.23.0-0.34.0` for the runs of releases whose mark is set ("none" when there is none)."""
    runs: list[str] = []
    start = None
    for i, (release, mark) in enumerate(zip(releases, marks, strict=True)):
        if mark and start is None:
            start = release
        if start is not None and (not mark or i == len(releases) - 1):
            end = release if mark else releases[i - 1]
            runs.append(start if start == end else f"{start}-{end}")
            start = None
    return ", ".join(runs) or "none"


def report(data: dict[str, Any], facts: dict[str, Any]) -> str:
    """One block per row with a code condition: the releases where the code allows the bug, those the bounds admit."""
    releases = list(facts["releases"])
    lines = [f"{len(releases)} releases, {releases[0]} .. {releases[-1]}; rows with a code_condition:"]
    for row in data["issues"]:
        condition = row.get("code_condition")
        if not condition:
            continue
        holds = [condition_holds(condition, facts["releases"][v]["probes"]) for v in releases]
        admitted = [SpecifierSet(row["affects"]["vllm"]).contains(v) for v in releases]
        verdict = disagreements(row, facts, data)
        lines.append(f"{row['id']}: {'OK' if not verdict else 'DISAGREES'} ({condition['bounds']})")
        lines.append(f"  code:   {_ranges(releases, holds)}")
        lines.append(f"  bounds: {_ranges(releases, admitted)} (vllm {row['affects']['vllm']})")
        lines += [f"  ! {d}" for d in verdict]
    return "\n".join(lines) + "\n"


def stale_entries(committed: dict[str, Any], derived: dict[str, Any]) -> list[str]:
    """What differs between the committed facts and the ones the wheels give, one line per release/probe."""
    out = [
        f"{k}: committed {committed.get(k)!r}, derived {derived[k]!r}"
        for k in ("probes_sha256",)
        if committed.get(k) != derived[k]
    ]
    old, new = committed.get("releases", {}), derived["releases"]
    out += [f"{v}: not in the committed file" for v in new if v not in old]
    out += [f"{v}: no longer in range" for v in old if v not in new]
    for v in (v for v in new if v in old):
        for key in ("wheel", "sha256"):
            if old[v].get(key) != new[v][key]:
                out.append(f"{v} {key}: committed {old[v].get(key)}, derived {new[v][key]}")
        for pid, where in new[v]["probes"].items():
            if old[v].get("probes", {}).get(pid, "?") != where:
                out.append(f"{v} {pid}: committed {old[v].get('probes', {}).get(pid, 'nothing')}, derived {where}")
    return out


def grep(pattern: str, files: list[str], releases: list[str], cache: Path | None) -> str:
    """Where an ad-hoc probe matches in each release (for writing a new probe)."""
    probe = Probe("grep", tuple(files), pattern, "")
    out = []
    for v in releases:
        tree = vllm_wheels.python_tree(v, cache)
        out.append(f"{v}\t{probe.find(tree, python_files(tree)) or '-'}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_rocm_stack.known_issues_audit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"derive the facts from the wheels and rewrite {FACTS}")
    mode.add_argument(
        "--check",
        action="store_true",
        help=f"derive the facts from the wheels; exit 1 when {FACTS} is stale or a row disagrees",
    )
    mode.add_argument(
        "--report",
        action="store_true",
        help=f"per row: where the code allows the bug and what the bounds say (from {FACTS}, no download)",
    )
    mode.add_argument("--grep", metavar="REGEX", help="print where REGEX first matches in each release (with --files)")
    parser.add_argument(
        "--files",
        action="append",
        default=[],
        metavar="GLOB",
        help="files --grep searches: fnmatch on the path inside the wheel, e.g. 'vllm/platforms/rocm.py' or"
        " '*/rocm_attn.py' (repeatable; default every file)",
    )
    parser.add_argument(
        "--releases", default="", help="comma-separated releases for --grep (default: the ones in the facts file)"
    )
    parser.add_argument(
        "--root", type=Path, default=REPO, help="the checkout whose data and facts are used (default: this one)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help=f"where the Python files of each release are kept (default {vllm_wheels.DEFAULT_CACHE})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each release")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    root = args.root.resolve()
    data = load_data(root)
    facts_path = root / FACTS
    try:
        if args.report or args.grep:
            facts = json.loads(facts_path.read_text(encoding="utf-8")) if facts_path.is_file() else {"releases": {}}
            if args.report:
                print(report(data, facts), end="")
                return 0
            releases = [r.strip() for r in args.releases.split(",") if r.strip()] or list(facts["releases"])
            print(grep(args.grep, args.files or ["*"], releases, args.cache), end="")
            return 0
        available = vllm_wheels.pypi_releases()
        releases = releases_to_check(data, available)
        derived = derive(data, releases, args.cache)
        wanted = render(derived)
    except (AuditError, vllm_wheels.WheelError, OSError, KeyError, ValueError) as exc:
        print(f"known-issues audit: {exc}", file=sys.stderr)
        return 2
    if args.write:
        facts_path.write_text(wanted, encoding="utf-8")
        print(f"wrote {facts_path.relative_to(root)} ({len(releases)} releases, {releases[0]} .. {releases[-1]})")
    elif not facts_path.is_file() or facts_path.read_text(encoding="utf-8") != wanted:
        committed = json.loads(facts_path.read_text(encoding="utf-8")) if facts_path.is_file() else {}
        for line in stale_entries(committed, derived)[:50]:
            print(f"  {line}", file=sys.stderr)
        print(
            f"{FACTS} is stale (the wheels of {releases[0]} .. {releases[-1]} say otherwise): run `{GENERATED_BY}`",
            file=sys.stderr,
        )
        return 1
    newer = sorted((v for v in available if Version.parse(v) > Version.parse(releases[-1])), key=Version.parse)
    if newer:
        print(
            f"note: PyPI has releases newer than releases_checked_up_to ({', '.join(newer)}): check the open rows"
            " there, raise releases_checked_up_to, then --write",
            file=sys.stderr,
        )
    facts = json.loads(wanted)
    problems = consistency(data, facts) + [
        f"{r['id']}: {d}" for r in data["issues"] for d in disagreements(r, facts, data)
    ]
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    if args.check:
        print(f"{FACTS} is up to date with the wheels of {len(releases)} releases; every row's bounds agree with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
