"""What a Markdown file links to: the anchors GitHub gives its headings (`## VllmPodHeldOut` -> `vllmpodheldout`,
"### `mode_mismatch`" -> `mode_mismatch`)."""

from __future__ import annotations

import re


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def section(text: str, name: str) -> str:
    """The body of the heading whose anchor is `name`, up to the next heading of any level ("" when none)."""
    parts = re.split(r"^#{1,6} (.+)$", text, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        if anchor(heading) == name:
            return body
    return ""
