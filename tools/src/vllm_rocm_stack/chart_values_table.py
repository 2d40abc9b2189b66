"""The chart README's values table, generated from the `## @param KEY DESCRIPTION` comments in values.yaml.

Bitnami's readme-generator convention, without its Node.js tool: `make generate` (vllm_rocm_stack.generate) writes
the table between the VALUES markers of charts/vllm-rocm/README.md, `make check` and tests/charts compare it.
`python -m vllm_rocm_stack.chart_values_table` prints the table.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from .config import REPO

CHART = REPO / "charts" / "vllm-rocm"
BEGIN, END = "<!-- VALUES:BEGIN -->", "<!-- VALUES:END -->"
PARAM = re.compile(r"^\s*## @param (\S+) (.+)$")
MAX_DEFAULT = 60  # long defaults (resources, securityContext) are cut; values.yaml has them in full


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


def _split(readme: str, where: Path) -> tuple[str, str]:
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"{where} needs exactly one {BEGIN} ... {END} block")
    head, rest = readme.split(BEGIN, 1)
    return head, rest.split(END, 1)[1]


def readme_table(chart: Path = CHART) -> str:
    readme = (chart / "README.md").read_text()
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"{chart / 'README.md'} has no {BEGIN} ... {END} block")
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def readme(chart: Path = CHART) -> str:
    """The chart README with the table between the markers made from values.yaml (the rest as it is)."""
    path = chart / "README.md"
    head, tail = _split(path.read_text(), path)
    return f"{head}{BEGIN}\n{table(chart)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vllm_rocm_stack.chart_values_table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--chart", type=Path, default=CHART, help="the chart directory (default: charts/vllm-rocm)")
    args = ap.parse_args(argv)
    print(table(args.chart))
    return 0


if __name__ == "__main__":
    sys.exit(main())
