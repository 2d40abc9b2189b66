"""What the chart tests rendered, as the objects a cluster would receive, and how to apply them.

Under `make test` the chart tests (tests/charts) run first in the same process, and helm_chart.RENDERED holds every
render helm accepted there. Run on their own (`pytest tests/kube`), the dry-run tests run the chart tests once in a
child pytest that writes each render to a directory (helm_chart.RENDER_LOG) and read them from there."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import helm_chart

REPO = Path(__file__).resolve().parents[2]
HOOK = "helm.sh/hook"


@dataclass
class Render:
    test: str  # the first chart test that rendered it
    docs: list[dict[str, Any]]


@dataclass
class Objects:
    """The distinct objects of many renders (most renders share most objects), each with the renders it came from."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    sources: list[list[int]] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)

    def add(self, doc: dict[str, Any], render: int) -> None:
        key = json.dumps(doc, sort_keys=True)
        if key not in self._index:
            self._index[key] = len(self.docs)
            self.docs.append(doc)
            self.sources.append([])
        self.sources[self._index[key]].append(render)


def parse(manifest: str) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~300 renders of ~100 kB each
    return [d for d in yaml.load_all(manifest, Loader=loader) if d]


def from_session() -> list[Render]:
    return [Render(test, parse(text)) for text, test in helm_chart.RENDERED.items()]


def from_child_pytest(log_dir: Path) -> tuple[list[Render], str]:
    """Run the chart tests in a child pytest that logs every accepted render; returns them and its summary line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, helm_chart.RENDER_LOG: str(log_dir)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            str(REPO / "tests" / "charts"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    renders = []
    for path in sorted(log_dir.glob("*.json")):
        entry = json.loads(path.read_text())
        renders.append(Render(entry["test"], parse(entry["manifest"])))
    return renders, summary


def in_namespace(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object as the release would render it in `namespace` (helm template -n): the object's own namespace and
    the namespace of the ServiceAccounts a RoleBinding names."""
    doc = copy.deepcopy(doc)
    if "namespace" in doc.get("metadata", {}):
        doc["metadata"]["namespace"] = namespace
    for subject in doc.get("subjects") or []:
        if "namespace" in subject:
            subject["namespace"] = namespace
    return doc


def is_hook(doc: dict[str, Any]) -> bool:
    return HOOK in (doc.get("metadata", {}).get("annotations") or {})


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]
