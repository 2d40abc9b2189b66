"""The strict unified-diff applier: exact position, exact context, no fuzz."""

from __future__ import annotations

import pytest
from vllm_rocm_patches import unidiff
from vllm_rocm_patches.errors import PatchConflict, SeriesError

BASE = "".join(f"line {i}\n" for i in range(1, 11))
PATCH = """\
Description: header text is skipped
---
--- a/pkg/f.py
+++ b/pkg/f.py
@@ -4,3 +4,3 @@
 line 4
-line 5
+LINE FIVE
 line 6
"""


def test_apply_and_reverse_roundtrip() -> None:
    fp = unidiff.parse(PATCH)[0]
    assert fp.path == "pkg/f.py"
    out = unidiff.apply_to_text(BASE, fp)
    assert out == BASE.replace("line 5\n", "LINE FIVE\n")
    assert unidiff.apply_to_text(out, fp.reversed()) == BASE
    assert not unidiff.applies(out, fp)  # already applied: forward no longer matches


def test_shifted_context_is_rejected_no_offset() -> None:
    fp = unidiff.parse(PATCH)[0]
    with pytest.raises(PatchConflict, match="hunk #1 does not match at line 4"):
        unidiff.apply_to_text("extra\n" + BASE, fp)  # GNU patch would apply this with offset 1


def test_changed_context_line_is_rejected_no_fuzz() -> None:
    fp = unidiff.parse(PATCH)[0]
    with pytest.raises(PatchConflict):
        unidiff.apply_to_text(BASE.replace("line 6\n", "line six\n"), fp)  # GNU patch: fuzz 1
    with pytest.raises(PatchConflict):
        unidiff.apply_to_text(BASE.replace("line 4\n", "line 4 \n"), fp)  # trailing whitespace matters


def test_no_newline_at_end_of_file() -> None:
    eol = "\\ No newline at end of file\n"
    diff = f"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n{eol}+c\n{eol}"
    fp = unidiff.parse(diff)[0]
    assert unidiff.apply_to_text("a\nb", fp) == "a\nc"
    with pytest.raises(PatchConflict):
        unidiff.apply_to_text("a\nb\n", fp)


def test_pure_insertion_and_multiple_hunks() -> None:
    diff = "--- a/f\n+++ b/f\n@@ -1,0 +2,1 @@\n+inserted\n@@ -9,2 +10,2 @@\n line 9\n-line 10\n+the end\n"
    out = unidiff.apply_to_text(BASE, unidiff.parse(diff)[0])
    assert out.splitlines()[:3] == ["line 1", "inserted", "line 2"]
    assert out.endswith("line 9\nthe end\n")


@pytest.mark.parametrize(
    "bad",
    [
        "no diff here\n",
        "--- a/f\n+++ b/f\n",  # no hunks
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n",  # truncated hunk
        "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",  # escapes the root
    ],
)
def test_malformed_patches_are_series_errors(bad: str) -> None:
    with pytest.raises(SeriesError):
        unidiff.parse(bad)
