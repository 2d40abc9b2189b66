"""The cluster DNS is CoreDNS built with only the plugins its Corefile names (tools/kube/coredns/main.go): a plugin
added to the Corefile and not to the build would make CoreDNS refuse its configuration at the node's start, minutes
into a cold run. This holds the two lists together at once (unit tier: files only)."""

from __future__ import annotations

import re

import yaml
from vllm_rocm_stack.config import REPO

COREFILE_YAML = REPO / "tools" / "kube" / "coredns.yaml"
MAIN_GO = REPO / "tools" / "kube" / "coredns" / "main.go"
PLUGIN_IMPORT = re.compile(r'^\s*_ "github\.com/coredns/coredns/plugin/([a-z0-9_]+)"\s*$', re.M)


def corefile_plugins(corefile: str) -> set[str]:
    """The directives of every server block: the first word of each line at depth 1 (a plugin's own block, such as
    kubernetes { ... }, is skipped)."""
    plugins: set[str] = set()
    depth = 0
    for raw in corefile.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if depth == 1 and line != "}":
            plugins.add(line.split()[0].rstrip("{"))
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"unbalanced braces at {raw!r}"
    assert depth == 0, "unbalanced braces in the Corefile"
    return plugins


def built_plugins(main_go: str) -> set[str]:
    return set(PLUGIN_IMPORT.findall(main_go))


def the_corefile() -> str:
    docs = [d for d in yaml.safe_load_all(COREFILE_YAML.read_text()) if d and d.get("kind") == "ConfigMap"]
    assert len(docs) == 1, f"{COREFILE_YAML}: expected one ConfigMap, found {len(docs)}"
    return str(docs[0]["data"]["Corefile"])


def test_the_build_has_exactly_the_plugins_the_corefile_names() -> None:
    used, built = corefile_plugins(the_corefile()), built_plugins(MAIN_GO.read_text())
    assert used, "no plugin read from the Corefile: the parser, not the Corefile, is wrong"
    assert used - built == set(), f"the Corefile names plugins {MAIN_GO} does not build: {sorted(used - built)}"
    assert built - used == set(), f"{MAIN_GO} builds plugins no Corefile line uses: {sorted(built - used)}"


def test_the_reading_sees_a_plugin_the_build_lacks() -> None:
    """The check above on a Corefile with one more plugin (and a nested block, a comment): it must name it."""
    corefile = the_corefile().replace(
        "cache 30", "cache 30\n    log  # every query\n    forward . 10.0.0.1 {\n      max_fails 2\n    }"
    )
    assert corefile_plugins(corefile) - built_plugins(MAIN_GO.read_text()) == {"log", "forward"}
