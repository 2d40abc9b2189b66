"""The chart README's values table, generated from the `## @param KEY DESCRIPTION` comments in values.yaml.

Bitnami's readme-generator convention, without its Node.js tool: the test compares the README with this output,
and `python tests/charts/values_table.py --write` refreshes the README between the VALUES markers.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "vllm-rocm"
BEGIN, END = "<!-- VALUES:BEGIN -->", "<!-- VALUES:END -->"
PARAM = re.compile(r"^\s*## @param (\S+) (.+)$")
MAX_DEFAULT = 60  # long defaults (resources, securityContext) are cut; values.yaml has them in full

log = logging.getLogger(__name__)


def params(values_text: str) -> list[tuple[str, str]]:
    """(key, description) in file order."""
    return [(m.group(1), m.group(2).strip()) for line in values_text.splitlines() if (m := PARAM.match(line))]


def lookup(values: dict[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"@param {key}: no such value in values.yaml")
        node = node[part]
    return node


def render_default(value: Any) -> str:
    if isinstance(value, str):
        quote = "'" if '"' in value else '"'
        text = quote + value + quote
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        text = text.removesuffix("\n...").removesuffix("...").strip()
    if len(text) > MAX_DEFAULT:
        text = text[: MAX_DEFAULT - 3] + "..."
    return "`" + text.replace("|", "\\|") + "`"


def table(chart: Path = CHART) -> str:
    text = (chart / "values.yaml").read_text()
    values = yaml.safe_load(text)
    rows = ["| Key | Description | Default |", "|---|---|---|"]
    for key, desc in params(text):
        cell = desc.replace("|", "\\|")
        rows.append(f"| `{key}` | {cell} | {render_default(lookup(values, key))} |")
    return "\n".join(rows)


def readme_table(chart: Path = CHART) -> str:
    readme = (chart / "README.md").read_text()
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"{chart / 'README.md'} has no {BEGIN} ... {END} block")
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def write(chart: Path = CHART) -> None:
    path = chart / "README.md"
    readme = path.read_text()
    head, rest = readme.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(f"{head}{BEGIN}\n{table(chart)}\n{END}{tail}")
    log.info("wrote the values table into %s", path)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", action="store_true", help="rewrite the table in the chart README")
    args = ap.parse_args(argv)
    if args.write:
        write()
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
