"""DEP-3 patch headers (https://dep-team.pages.debian.net/deps/dep3/): parse, check required fields."""

from __future__ import annotations

REQUIRED_FIELDS: tuple[str, ...] = ("Description", "Origin", "Bug", "Applied-Upstream", "Last-Update")


def parse_header(text: str) -> dict[str, str]:
    """Return the header fields (RFC 822 style, continuation lines start with a space) before the diff."""
    fields: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        if line == "---" or line.startswith("--- ") or line.startswith("diff ") or line.startswith("Index: "):
            break
        if line.startswith((" ", "\t")) and current is not None:
            fields[current] += "\n" + line.strip()
        elif ":" in line and not line.startswith(" "):
            key, value = line.split(":", 1)
            current = key.strip()
            fields[current] = value.strip()
        elif not line.strip():
            current = None
    return fields


def missing_fields(fields: dict[str, str]) -> list[str]:
    return [f for f in REQUIRED_FIELDS if not fields.get(f, "").strip()]
