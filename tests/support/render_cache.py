"""helm's answers to chart renders, kept on disk by everything they depend on.

A `helm template` (or `install --dry-run=client`) is a pure function of the helm binary, helm's own environment
(HELM_*), the chart's files, the values files and the other arguments; the chart has no `lookup`, `now` or `rand*`.
So its exit code, stdout and stderr are kept under a key of all of those, by content (not by path: the agreement
tests render a fresh copy of the chart each session), and the next render with the same key is answered from disk,
a failed render as it failed. The unit tier asks for ~800 renders, ~130 s of helm's CPU, almost all different from
each other but the same as in the last run: a run after a change that touched neither the chart nor helm renders
nothing again. Arguments the key cannot see through (a flag that reads a file other than -f/--values, a chart that
is not a directory) are not cached.

Entries of another helm binary or environment are removed when a process first uses the cache; those of a chart
no run has used for PRUNE_AFTER seconds too (each process marks the charts it uses).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

# Flags that carry their whole meaning in the argument list (no file, no cluster).
SELF_CONTAINED = {"-n", "--kube-version", "--api-versions", "--set-json", "--dry-run=client", "--show-only"}
VALUES_FILES = {"-f", "--values"}
PRUNE_AFTER = 3 * 24 * 3600


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class RenderCache:
    def __init__(
        self, directory: Path, helm: Path, stable_chart: Path | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        """`stable_chart`: a chart that does not change while this process runs (the checkout's), digested once."""
        self.directory, self.helm, self.stable_chart = directory, helm, stable_chart
        self.env = dict(os.environ if env is None else env)
        self._base: Path | None = None
        self._stable_digest: str | None = None
        self._marked: set[Path] = set()

    def _here(self) -> Path:
        """This helm's directory (made, and the others' and stale charts' entries removed, on first use)."""
        if self._base is None:
            helm_env = sorted((k, v) for k, v in self.env.items() if k.startswith("HELM_"))
            digest = hashlib.sha256(json.dumps([file_digest(self.helm), helm_env]).encode()).hexdigest()[:32]
            base = self.directory / digest
            if self.directory.is_dir():
                for other in self.directory.iterdir():
                    if other.name != digest and not other.name.startswith("."):
                        shutil.rmtree(other, ignore_errors=True)
            base.mkdir(parents=True, exist_ok=True)
            for chart in base.iterdir():
                try:
                    if time.time() - chart.stat().st_mtime > PRUNE_AFTER:
                        shutil.rmtree(chart, ignore_errors=True)
                except OSError:
                    pass  # removed meanwhile by another process
            self._base = base
        return self._base

    def _chart_digest(self, chart: Path) -> str:
        if self.stable_chart is not None and chart == self.stable_chart:
            if self._stable_digest is None:
                self._stable_digest = tree_digest(chart)
            return self._stable_digest
        return tree_digest(chart)  # a probe copy may be written between renders: read it each time

    def entry(self, args: tuple[str, ...]) -> Path | None:
        """Where the answer to `helm *args` is kept; None when the key cannot see all it depends on."""
        if args[:1] not in (("template",), ("install",)) or len(args) < 3:
            return None
        chart = Path(args[2])
        if not (chart / "Chart.yaml").is_file():
            return None
        key: list[str] = [*args[:2], "<chart>"]
        rest = iter(args[3:])
        for arg in rest:
            if arg in VALUES_FILES:
                path = Path(next(rest, ""))
                if not path.is_file():
                    return None
                key += [arg, "sha256:" + file_digest(path)]
            elif arg.startswith("-") and arg not in SELF_CONTAINED:
                return None
            else:
                key.append(arg)
        where = self._here() / self._chart_digest(chart)[:32]
        if where not in self._marked:
            where.mkdir(exist_ok=True)
            os.utime(where)  # used now: not pruned
            self._marked.add(where)
        return where / (hashlib.sha256("\0".join(key).encode()).hexdigest() + ".json")

    def get(self, entry: Path, args: tuple[str, ...]) -> subprocess.CompletedProcess[str] | None:
        try:
            raw = json.loads(entry.read_text())
            return subprocess.CompletedProcess([str(self.helm), *args], raw["returncode"], raw["stdout"], raw["stderr"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or removed by a process that pruned it: render again

    def put(self, entry: Path, proc: subprocess.CompletedProcess[str]) -> None:
        body = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        try:
            fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(body, f)
            os.replace(tmp, entry)  # whole or not at all, for the other sessions and workers reading it
        except OSError:
            pass  # a cache that cannot be written costs a render next time, nothing else
