"""`make new-release VERSION=X`: bring a vLLM release in, from its released files.

1. fetches vLLM X and the newest supported release before it from PyPI (every Python file of each wheel, cached in
   WORK; vllm_rocm_stack.vllm_wheels, which the known-issues audit reads too);
2. runs the patch tool's `status` on X (what each fix of the series finds in X's files);
3. writes the series skeleton patches/vllm-X/ (`series` and `series.json` with the pristine sha256 and the
   post-condition `status` checked) and the registry row in releases.json (and newest_checked), then regenerates
   what is made from the registry (`make generate`);
4. names what else changed against the previous release: the `vllm serve` flags, the VLLM_* variables, the attention
   backend and CUDAGraphMode names (against the ones the evaluator and the chart know), and where each log line the
   sidecar reads is written (against the source files its parser accepts them from).

A release whose files need no patch ends here: review the row (base image, digest) and the list of changes, run the
tests it names. One that needs a patch gets a skeleton that `make check` refuses until the patch is there.
The recipe: patches/README.md, "Adding a vLLM release".
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from vllm_rocm_health import logparse as lp
from vllm_rocm_known_issues.evaluator import MODES, KnownIssuesError, canonical_attention_backend
from vllm_rocm_known_issues.pep440 import Version
from vllm_rocm_patches import series as patch_series

from . import generate, releases, vllm_release_facts, vllm_releases, vllm_wheels
from .config import REPO

log = logging.getLogger(__name__)

# PyPI's simple index (PEP 691 JSON), where pip looks: the sdist's sha256 as PyPI lists it.
PYPI_SIMPLE = "https://pypi.org/simple/vllm/"
# Where each release defines its attention backends' names (0.14+, 0.12-0.13, up to 0.11).
BACKEND_FILES = (
    ("vllm/v1/attention/backends/registry.py", "AttentionBackendEnum"),
    ("vllm/attention/backends/registry.py", "AttentionBackendEnum"),
    ("vllm/platforms/interface.py", "_Backend"),
)
MODE_FILES = (("vllm/config/compilation.py", "CUDAGraphMode"), ("vllm/config.py", "CUDAGraphMode"))
# The lines the sidecar's parser acts on (vllm_rocm_health.logparse), as a literal the release's source writes, and
# the logger file names (`[file.py:N]`) the parser takes them from (None: a raw line, any file).
LOG_TEMPLATES: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("Initializing a V1 LLM engine", lp._SRC_ENGINE),
    ("non-default args", lp._SRC_ARGS),
    ("Automatically detected platform", lp._SRC_PLATFORM),
    ("Resolved architecture", lp._SRC_MODEL),
    ("Available KV cache memory", lp._SRC_KV),
    ("Capturing CUDA graphs", None),
    ("Graph capturing finished", lp._SRC_CAPTURE),
    ("Profiling CUDA graph memory", lp._SRC_CAPTURE),
    ("Skipping CUDA graph capture", lp._SRC_CAPTURE),
    ("Cudagraph is disabled under eager mode", lp._SRC_RESOLVE),
    ("EngineCore failed to start", lp._SRC_FAILURE),
    ("[shutdown]", lp._SRC_SHUTDOWN),
    *((prose, lp._SRC_BACKEND) for prose, _name in lp._BACKEND_PROSE),
)


def say(text: str = "") -> None:
    print(text, flush=True)


# --- what the release's files say ----------------------------------------------------------------------------------


def enum_members(tree: Path, candidates: Iterable[tuple[str, str]]) -> set[str]:
    """The member names of the first class found among (file, class) candidates."""
    for rel, cls in candidates:
        path = tree / rel
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                return {
                    t.id
                    for stmt in node.body
                    if isinstance(stmt, (ast.Assign, ast.AnnAssign))
                    for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                    if isinstance(t, ast.Name) and t.id.isupper()
                }
    return set()


def log_sources(tree: Path) -> dict[str, set[str]]:
    """template -> the files (base names, as the logger header prints them) whose source contains it."""
    found: dict[str, set[str]] = {t: set() for t, _src in LOG_TEMPLATES}
    for path in (tree / "vllm").rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        for template, _src in LOG_TEMPLATES:
            if template in text:
                found[template].add(path.name)
    return found


def _known_backend(name: str) -> bool:
    """The evaluator (and the chart, which a test keeps equal to it) can name it."""
    try:
        canonical_attention_backend(name)
    except KnownIssuesError:
        return False
    return True


def flag_options(tree: Path) -> set[str]:
    return {o for f in vllm_release_facts.flags(tree) for o in f.options}


# --- the report of what changed ------------------------------------------------------------------------------------


def _diff(title: str, old: set[str], new: set[str], old_v: str, new_v: str) -> list[str]:
    added, removed = sorted(new - old), sorted(old - new)
    if not added and not removed:
        return [f"{title}: unchanged ({len(new)})"]
    out = [f"{title}: {len(added)} new in {new_v}, {len(removed)} gone since {old_v}"]
    out += [f"    + {x}" for x in added] + [f"    - {x}" for x in removed]
    return out


def changes(prev_tree: Path, tree: Path, prev: str, version: str) -> list[str]:
    out = _diff("`vllm serve` flags", flag_options(prev_tree), flag_options(tree), prev, version)
    out += _diff(
        "VLLM_* variables (envs.py)",
        vllm_release_facts.env_vars(prev_tree),
        vllm_release_facts.env_vars(tree),
        prev,
        version,
    )
    backends = enum_members(tree, BACKEND_FILES)
    out += _diff("attention backends", enum_members(prev_tree, BACKEND_FILES), backends, prev, version)
    unknown = sorted(b for b in backends if not _known_backend(b))
    if unknown:
        out.append(
            f"    NOT KNOWN to the evaluator and the chart: {', '.join(unknown)} -> add them to BACKEND_NAMES "
            "(known-issues/src/vllm_rocm_known_issues/evaluator.py) and the chart's list (templates/_known_issues.tpl)"
        )
    modes = enum_members(tree, MODE_FILES)
    out += _diff("CUDAGraphMode members", enum_members(prev_tree, MODE_FILES), modes, prev, version)
    if modes and modes != set(MODES):
        out.append(
            f"    the evaluator's MODES are {', '.join(MODES)}: tests/known_issues/test_modes.py says what to change"
        )
    before, after = log_sources(prev_tree), log_sources(tree)
    lines = []
    for template, accepted in LOG_TEMPLATES:
        old, new = before[template], after[template]
        if not old and not new:
            continue
        unread = (new - old) - accepted if accepted is not None else set()
        if old and not new:
            lines.append(
                f"    GONE   {template!r} (in {', '.join(sorted(old))} in {prev}): the sidecar no longer sees it"
            )
        elif unread:
            lines.append(
                f"    MOVED  {template!r} now also in {', '.join(sorted(unread))}, which the sidecar's parser "
                "does not read it from (vllm_rocm_health/logparse.py _SRC_*)"
            )
        elif new != old:
            missed = sorted(new - accepted) if accepted is not None else []
            read = f"not read from {', '.join(missed)}, as before" if missed else "all read"
            lines.append(f"    files  {template!r}: {', '.join(sorted(old))} -> {', '.join(sorted(new))} ({read})")
    out.append(
        f"log lines the sidecar reads ({len(LOG_TEMPLATES)} templates): "
        + ("unchanged" if not lines else f"{len(lines)} changed")
    )
    return out + lines


# --- the series skeleton and the registry row ----------------------------------------------------------------------


def status(tree: Path, version: str) -> tuple[int, dict]:
    """The patch tool's `status --json` on the release's source tree (the code the image build runs, uninstalled)."""
    env = {**os.environ, "PYTHONPATH": vllm_releases.PATCH_TOOL_PYTHONPATH}
    env.pop("VLLM_ROCM_PATCHES_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_patches", "--quiet", "status", str(tree), "--release", version, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"patches status failed ({proc.returncode}):\n{proc.stderr[-2000:]}") from None


def series_entries(report: dict, sset: patch_series.SeriesSet, prev: str | None) -> tuple[list[dict], list[str]]:
    """series.json entries for what `status` found, and the fixes that need a patch (affected or unknown)."""
    entries, needs = [], []
    prev_entries = {e.fix: e for e in sset.releases[prev].entries} if prev else {}
    for res in report["entries"]:
        fix = sset.fixes[res["fix"]]
        state = res["state"]
        files = {path: {"pristine_sha256": h["before"]} for path, h in res["files"].items()}
        if state not in ("not-needed", "fixed-upstream"):
            needs.append(f"{fix.id}: {state}: {res['message']}")
            entries.append(
                {
                    "fix": fix.id,
                    "state": "patch",
                    "patch": f"0001-{fix.id}.patch",
                    "targets": [],
                    "files": files,
                    "postconditions": [],
                }
            )
            continue
        found = res["postconditions"][0]["found"]
        attribute = res["postconditions"][0]["description"].split(".", 1)[1]
        before = prev_entries.get(fix.id)
        same = before is not None and before.state == state
        entry: dict = {
            "fix": fix.id,
            "state": state,
            "upstream": before.upstream if same and before else fix.content_states[found]["why"],
        }
        if same and before and before.evidence:
            entry["evidence"] = before.evidence
        entry["files"] = files
        entry["postconditions"] = [
            {"kind": "class-attribute", "file": fix.file, "class": fix.cls, "attribute": attribute, "equals": found}
        ]
        entries.append(entry)
    return entries, needs


def sdist_sha256(version: str) -> str:
    """The sha256 PyPI's simple index lists for vllm-<version>.tar.gz (the source build refuses any other file)."""
    request = urllib.request.Request(PYPI_SIMPLE, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as r:  # noqa: S310 - a fixed https URL
        files = json.load(r)["files"]
    sdists = [f for f in files if f["filename"] == f"vllm-{version}.tar.gz"]
    if len(sdists) != 1 or "sha256" not in sdists[0].get("hashes", {}):
        raise SystemExit(f"PyPI's simple index lists {len(sdists)} sdists vllm-{version}.tar.gz with a sha256")
    return str(sdists[0]["hashes"]["sha256"])


def registry_row(version: str) -> dict:
    return {
        "release": version,
        "build": "prebuilt",
        "base_image": f"vllm/vllm-openai-rocm:v{version}",
        "base_digest": None,
        "digest_variable": "BASE_DIGEST_" + version.replace(".", "_"),
        "why": "the vLLM project's own ROCm release image; no digest could be verified offline, so the build needs "
        "it passed in (written by make new-release: review)",
        "sdist_sha256": sdist_sha256(version),
    }


def write_registry(root: Path, version: str, row: dict) -> None:
    path = root / "releases.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["releases"] = sorted([*data["releases"], row], key=lambda r: Version.parse(r["release"]))
    checked = data.setdefault("checked", {})
    checked["also"] = [v for v in checked.get("also", []) if v != version]
    if Version.parse(version) > Version.parse(data["newest_checked"]):
        data["newest_checked"] = version
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def write_series(root: Path, version: str, entries: list[dict], needs: list[str]) -> Path:
    directory = root / "patches" / f"vllm-{version}"
    directory.mkdir(parents=True)
    if needs:
        names = "\n".join(e["patch"] for e in entries if e["state"] == "patch")
        text = f"# vLLM {version}: written by make new-release; the patches below are still to be made.\n{names}\n"
    else:
        why = "; ".join(f"{e['fix']} {e['state']} ({e['upstream']})" for e in entries)
        text = f"# vLLM {version}: no patches ({why}). Written by make new-release from `patches status`.\n"
    (directory / "series").write_text(text, encoding="utf-8")
    meta = {"schema": 1, "release": version, "entries": entries}
    (directory / "series.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return directory


# --- the command ---------------------------------------------------------------------------------------------------


def run(version: str, root: Path = REPO) -> int:
    try:
        Version.parse(version)
    except ValueError as e:
        raise SystemExit(f"{version!r} is not a vLLM release: {e}") from None
    reg = releases.load(root / "releases.json")
    if version in reg.supported:
        raise SystemExit(f"vLLM {version} is already supported (releases.json has its row)")
    prev = reg.previous(version)
    if prev is None:
        raise SystemExit(
            f"vLLM {version} is older than every supported release ({reg.supported[0]}): nothing to compare"
        )
    say(f"== vLLM {version}, compared with {prev} (the newest supported release before it)")
    tree = vllm_wheels.python_tree(version)
    prev_tree = vllm_wheels.python_tree(prev)
    say(f"   files: {tree}\n          {prev_tree}")

    say("\n== patches status")
    rc, report = status(tree, version)
    for res in report["entries"]:
        say(f"   {res['id']}: {res['state']}: {res['message']}")
    sset = patch_series.load(root / "patches")
    entries, needs = series_entries(report, sset, prev)

    say("\n== what else changed")
    for line in changes(prev_tree, tree, prev, version):
        say("   " + line)

    say("\n== written")
    directory = write_series(root, version, entries, needs)
    say(
        f"   {directory.relative_to(root)}/series, series.json ({len(entries)} entries"
        + (f"; {len(needs)} need a patch" if needs else ", nothing to apply")
        + ")"
    )
    write_registry(root, version, registry_row(version))
    audited = json.loads((root / "known-issues" / "known-issues.json").read_text(encoding="utf-8"))
    if Version.parse(version) > Version.parse(audited["releases_checked_up_to"]):
        say(
            f"   newest_checked is now {version}, the known issues were checked up to "
            f"{audited['releases_checked_up_to']}: audit them up to {version} (python -m "
            "vllm_rocm_stack.known_issues_audit --write, known-issues/README.md) and set releases_checked_up_to "
            "(tests/test_releases.py fails until both say the same)"
        )
    say(f"   releases.json: the row of {version} (base image vllm/vllm-openai-rocm:v{version}, digest to pass in)")
    if needs:
        say("\n== needs a patch (make check fails until the patch is there)")
        for n in needs:
            say("   " + n)
        say(
            "   make the patch from the real file (diff -u, a/ b/ prefixes), fill its files' sha256 and "
            "post-conditions in series.json, name it in the known-issues row it fixes; patches/README.md says how"
        )
        return 1
    written, failed = generate.write(root)
    for s in written:
        say(f"   {s.entry.path} (make generate)")
    for s in failed:
        say(f"   NOT WRITTEN {s.entry.path}: {s.reason}")
    say(
        "\n== next: review the row in releases.json (base image, digest, why) and the changes above, then run\n"
        "   pytest tests/test_releases.py tests/test_generated.py tests/patches tests/known_issues "
        "tests/charts/test_guard.py tests/docker/test_bake.py tests/docker/test_dockerfiles.py"
    )
    return 1 if failed or rc not in (0,) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make new-release VERSION=X",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("version", metavar="VERSION", help="the vLLM release on PyPI, e.g. 0.34.0")
    parser.add_argument("--root", type=Path, default=REPO, help="the tree to write into (default: this repository)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="   %(message)s")
    return run(args.version, args.root.resolve())


if __name__ == "__main__":
    sys.exit(main())
