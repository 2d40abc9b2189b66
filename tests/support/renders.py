"""The catalogue's renders (tests/support/chart_values.py) as the objects a cluster would receive, and how to apply
them: the same value sets in every session, whatever else runs and in whatever order."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from tests.support import helm_chart
from tests.support.chart_values import CATALOGUE

HOOK = "helm.sh/hook"


@dataclass
class Render:
    name: str  # the catalogue's name of its value set
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


def catalogue() -> list[Render]:
    """Every value set of the catalogue, rendered; one the chart refuses fails the caller, naming it."""
    out = []
    for name, values in CATALOGUE.items():
        try:
            out.append(Render(name, helm_chart.render(values)))
        except AssertionError as e:
            raise AssertionError(f"the chart refuses the catalogue's value set {name!r}: {e}") from None
    return out


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
