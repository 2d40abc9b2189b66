"""Run checkov, the scanner platform teams run on charts and Dockerfiles, offline, and read its findings.

checkov lives in a venv of its own (.work/checkov-venv, from requirements/checkov.lock; `make setup` builds it).
It runs with its update check and every platform download off, and, where the machine allows an unprivileged network
namespace, with no network at all: a result never depends on what a server said that day. So its output is a function
of its inputs, and a run is kept (CACHE) under a key of everything it reads: the files' names and bytes, the frameworks,
the command, and the lock checkov was installed from. An unchanged chart and Dockerfiles cost no new scan (27 s of a
warm unit tier); any changed byte scans again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_stack.config import WORK

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = Path(os.environ.get("CHECKOV", str(WORK / "checkov-venv" / "bin" / "checkov")))
DOCKERFILES = sorted(p for p in (ROOT / "docker").rglob("Dockerfile*") if not p.name.endswith(".dockerignore"))
# checkov's own switches for an offline run (checkov/common/util/env_vars_config.py, main.py of 3.3.30).
OFFLINE_ENV = {"CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "BC_SKIP_MAPPING": "TRUE"}
# The skip annotation (Kubernetes objects) and skip comment (Dockerfiles) checkov honours.
SKIP_ANNOTATION = re.compile(r"^(checkov|bridgecrew)\.io/skip")
SKIP_COMMENT = re.compile(r"^\s*#\s*(checkov|bridgecrew):skip=")
CACHE = WORK / "cache" / "checkov"
CACHE_KEEP = 8  # runs kept (a test module makes two)
LOCK = ROOT / "requirements" / "checkov.lock"
_WORKDIR = "@WORKDIR@"  # the run's own directory, in a kept output (each run has a new one)


@dataclass(frozen=True)
class Finding:
    check_id: str
    name: str
    resource: str
    file: str
    waiver: str  # checkov's suppress comment ("" for a failed check)

    def __str__(self) -> str:
        return f"{self.check_id} ({self.name}) on {self.resource} in {self.file}"


@dataclass
class Report:
    failed: list[Finding]
    skipped: list[Finding]
    passed: int
    files: set[str]  # every file checkov reported a check on (passed, failed or skipped)


@cache
def _no_network_prefix() -> tuple[str, ...]:
    """`unshare -rn` (a user and network namespace of its own, so no network) where the machine allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=30).returncode == 0:
        return (unshare, "-rn")
    return ()


def run(files: list[Path], frameworks: tuple[str, ...], workdir: Path) -> Report:
    """One checkov run over files (checkov ignores every -f once a -d is given, so files only); every framework's
    results in one Report."""
    if not CHECKOV.exists():
        pytest.fail(f"checkov not found at {CHECKOV} (run `make setup`)")
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "HOME": str(workdir),
        "XDG_CACHE_HOME": str(workdir / "cache"),
        "CKV_CACHE_DIR": str(workdir / "cache"),
    }
    # No --quiet: with it the JSON holds the failed checks only, and the skipped ones (the waivers) are needed too.
    cmd = [
        *_no_network_prefix(),
        str(CHECKOV),
        "--skip-download",
        "--compact",
        "--output",
        "json",
        "--framework",
        *frameworks,
        *args,
    ]
    kept = CACHE / f"{_key(cmd, files, workdir)}.json"
    if kept.is_file():
        data: Any = json.loads(kept.read_text().replace(_WORKDIR, str(workdir)))
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=workdir, env=env)
        # 0: all passed, 1: failed checks; anything else (or no JSON) is checkov itself failing.
        if proc.returncode not in (0, 1):
            raise AssertionError(f"checkov exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        try:
            data = json.loads(proc.stdout)
        except json.JSONDecodeError as e:
            raise AssertionError(f"checkov printed no JSON ({e}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}") from e
        _keep(kept, proc.stdout.replace(str(workdir), _WORKDIR))
    reports = data if isinstance(data, list) else [data]
    out = Report([], [], 0, set())
    for report in reports:
        if report.get("summary", {}).get("parsing_errors"):
            raise AssertionError(f"checkov could not parse: {report['results'].get('parsing_errors')}")
        results = report.get("results", {})
        out.passed += len(results.get("passed_checks", []))
        for kind, target in (("failed_checks", out.failed), ("skipped_checks", out.skipped)):
            for r in results.get(kind, []):
                waiver = r.get("check_result", {}).get("suppress_comment", "") if kind == "skipped_checks" else ""
                target.append(Finding(r["check_id"], r["check_name"], r["resource"], _abs(r), waiver))
        for kind in ("passed_checks", "failed_checks", "skipped_checks"):
            out.files.update(_abs(r) for r in results.get(kind, []))
    return out


def _key(cmd: list[str], files: list[Path], workdir: Path) -> str:
    """Everything a run reads: the command (the run's own directory named, not spelled), the lock checkov came
    from, and each file's name (as the run names it) and bytes."""
    h = hashlib.sha256()
    for part in [*cmd, LOCK.read_text(), *(f"{k}={v}" for k, v in sorted(OFFLINE_ENV.items()))]:
        h.update(part.replace(str(workdir), _WORKDIR).encode() + b"\0")
    for f in files:
        h.update(str(f).replace(str(workdir), _WORKDIR).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _keep(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)  # whole or not at all: a parallel run reads either nothing or all of it
    for old in sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-CACHE_KEEP]:
        old.unlink(missing_ok=True)


def _abs(result: dict[str, Any]) -> str:
    return result.get("file_abs_path") or result["file_path"]


def strip_waivers_from_manifests(text: str) -> str:
    """The same manifests without checkov's skip annotations (to see what each waiver suppresses)."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        ann = d.get("metadata", {}).get("annotations") or {}
        for key in [k for k in ann if SKIP_ANNOTATION.match(k)]:
            del ann[key]
    return yaml.safe_dump_all(docs, sort_keys=False)


def strip_waivers_from_dockerfile(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not SKIP_COMMENT.match(line))
