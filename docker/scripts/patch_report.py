"""Read the patch tool's JSON reports for apply-patches.sh (stdlib only: it runs inside the base image).

patch_report.py expect STATUS_JSON [--release X] [--level N] [--sha256 HEX]
    exit 1 (reasons on stderr) unless the tree is a release the series knows and matches what the image
    is labelled with; run on `status --json` output BEFORE anything is changed.
patch_report.py finish APPLY_JSON VERIFY_JSON [--python PYEXE]
    drop .pyc files compiled from a file the apply changed (recompile with PYEXE when given) and print
    the `versions` file (key=value lines) on stdout; exit 1 unless the verify report is ok.
patch_report.py facts VERSIONS_FILE
    print the `vllm-rocm facts: {json}` line the image entrypoint writes into the log before vLLM starts:
    the applied patch ids, the known-issue ids they fix, the ROCm version and the VLLM_ROCM_* environment,
    which vLLM itself never logs and the health sidecar needs to judge the known issues.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"patch_report: cannot read report {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"patch_report: {path} is not a patch tool report")
    return data


def patch_ids(rep: dict[str, Any]) -> list[str]:
    return [e["id"] for e in rep.get("entries", []) if e.get("kind") == "patch"]


def expectation_errors(rep: dict[str, Any], release: str, level: int | None, sha256: str) -> list[str]:
    rel = rep.get("release") or {}
    ser = rep.get("series") or {}
    errors = []
    if not rel.get("known_to_series"):
        errors.append(f"vLLM {rel.get('version')} is not a release the patch series knows: no image is built for it")
    if release and rel.get("release") != release:
        errors.append(f"expected vLLM {release} but the tree is vLLM {rel.get('version')}")
    found = len(patch_ids(rep))
    if level is not None and found != level:
        errors.append(f"expected patch level p{level} but series {ser.get('id')} holds {found} patch(es)")
    if sha256 and ser.get("sha256") != sha256:
        errors.append(f"expected series sha256 {sha256} but series {ser.get('id')} hashes to {ser.get('sha256')}")
    return errors


def drop_stale_bytecode(applied: dict[str, Any], python: str | None) -> list[Path]:
    """Remove the __pycache__ entries of every file the apply changed; they were compiled from the old file."""
    root = Path(applied.get("target") or ".")
    changed = []
    for entry in applied.get("entries", []):
        for rel_path, hashes in (entry.get("files") or {}).items():
            if hashes.get("before") == hashes.get("after"):
                continue
            src = root / rel_path
            for stale in src.parent.glob(f"__pycache__/{src.stem}.*.pyc"):
                stale.unlink()
            if python:  # the interpreter that imports it writes the pyc it will trust
                subprocess.run([python, "-m", "py_compile", str(src)], check=True)
            changed.append(src)
    return changed


def versions(rep: dict[str, Any], python: str | None) -> dict[str, str]:
    rel = rep.get("release") or {}
    ser = rep.get("series") or {}
    ids = patch_ids(rep)
    py_version = platform.python_version()
    if python:
        proc = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        )
        py_version = proc.stdout.strip() or py_version
    fixed = (rep.get("known_issues") or {}).get("fixed_by_applied_patches") or []
    return {
        "vllm_version": str(rel.get("version")),
        "vllm_release": str(rel.get("release")),
        "vllm_tree": str(rel.get("tree")),
        "patch_series": str(ser.get("id")),
        "patch_series_sha256": str(ser.get("sha256")),
        "patch_level": str(len(ids)),
        "image_tag": f"{rel.get('release')}-p{len(ids)}",
        "patches": ",".join(ids),
        "fixes_issues": ",".join(fixed),
        "states": ",".join(f"{e.get('fix')}:{e.get('state')}" for e in rep.get("entries", [])),
        "patch_tool": f"{rep.get('tool')} {rep.get('tool_version')}",
        "python": py_version,
    }


def read_versions(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep:
                out[key] = value
    return out


def rocm_version(info: str = "/opt/rocm/.info/version") -> str | None:
    """X.Y.Z of the ROCm install (the file says e.g. `7.0.0-38`)."""
    try:
        with open(info, encoding="utf-8") as fh:
            m = re.match(r"(\d+\.\d+(?:\.\d+)?)", fh.read().strip())
    except OSError:
        return None
    return m.group(1) if m else None


def facts(
    versions_file: str, environ: dict[str, str] | None = None, rocm_info: str = "/opt/rocm/.info/version"
) -> dict:
    env = os.environ if environ is None else environ
    v = read_versions(versions_file)
    series = v.get("patch_series", "")
    return {
        "vllm_release": v.get("vllm_release"),
        "patch_series": series,
        "patches": [f"{series}/{p}" for p in v.get("patches", "").split(",") if p],
        "fixes_issues": [i for i in v.get("fixes_issues", "").split(",") if i],
        "rocm": rocm_version(rocm_info),
        "env": {k: val for k, val in sorted(env.items()) if k.startswith("VLLM_ROCM_") or k in switch_names(env)},
    }


# The non-ROCM switches the known-issues data conditions on, should its file not be readable (never VLLM_API_KEY
# or any other variable that may hold a secret: only named switches are printed).
SWITCHES = ("VLLM_USE_BREAKABLE_CUDAGRAPH", "VLLM_FP8_MOE_REQUANT", "VLLM_FP8_MOE_REQUANT_ACT")


def switch_names(environ: dict[str, str] | os._Environ) -> set[str]:
    """The switches the known-issues data reads (its `switch_defaults`), from the data file of the image (or the
    repository), so a switch a row gains is printed without a change here."""
    here = Path(__file__).resolve().parent
    for path in (
        environ.get("VLLM_ROCM_KNOWN_ISSUES"),
        here.parent / "known-issues" / "known-issues.json",
        here.parents[1] / "known-issues" / "known-issues.json",
    ):
        try:
            names = json.loads(Path(path).read_text())["switch_defaults"]
        except (TypeError, OSError, ValueError, KeyError):
            continue
        if isinstance(names, dict):
            return {n for n in names if isinstance(n, str) and n.startswith("VLLM_")}
    return set(SWITCHES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("expect")
    p.add_argument("status_json")
    p.add_argument("--release", default="")
    p.add_argument("--level", type=int, default=None)
    p.add_argument("--sha256", default="")
    p = sub.add_parser("finish")
    p.add_argument("apply_json")
    p.add_argument("verify_json")
    p.add_argument("--python", default=None)
    p = sub.add_parser("facts")
    p.add_argument("versions_file")
    args = parser.parse_args(argv)
    if args.cmd == "facts":
        try:
            print("vllm-rocm facts: " + json.dumps(facts(args.versions_file), sort_keys=True))
        except OSError as exc:
            print(f"patch_report: cannot read {args.versions_file}: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "expect":
        errors = expectation_errors(_load(args.status_json), args.release, args.level, args.sha256)
        for err in errors:
            print(f"patch_report: {err}", file=sys.stderr)
        return 1 if errors else 0
    verify = _load(args.verify_json)
    if not verify.get("ok"):
        print(f"patch_report: {args.verify_json} says ok=false: {verify.get('summary')}", file=sys.stderr)
        return 1
    drop_stale_bytecode(_load(args.apply_json), args.python)
    for key, value in versions(verify, args.python).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
