"""pep440.py: versions parse and order as `packaging` does; the known-issues bounds judge every build of a release as
that release, conservatively (pre-releases and dev builds on the affected side of both bounds); input is bounded."""

from __future__ import annotations

import itertools
import json

import pytest
from packaging.specifiers import SpecifierSet as RefSet
from packaging.version import Version as RefVersion
from vllm_rocm_known_issues.pep440 import InvalidSpecifier, InvalidVersion, SpecifierSet, Version

from tests.support.vllm_releases import REPO_ROOT

VERSIONS = [
    "0",
    "0.9.2",
    "0.10.0",
    "0.10.1",
    "0.10.1.1",
    "0.10.1.1+rocm641",
    "0.10.2",
    "0.10.2+rocm700",
    "0.10.2.post1",
    "0.10.2.dev5",
    "0.10.2rc1",
    "0.10.2a1",
    "0.10.2b2",
    "0.10.2rc1.dev3",
    "0.10.2.post1.dev1",
    "0.10.3",
    "0.11.0.dev0",
    "0.11.0.dev123+g1234abc",
    "0.11.0rc1",
    "0.11.0rc2",
    "0.11.0",
    "0.11.0+rocm721",
    "0.11.0.0",
    "0.11.1",
    "0.15.0.dev0",
    "0.15.0.dev7+gabc",
    "0.15.0rc0",
    "0.15.0",
    "0.22.1rc1.dev42+g0a1b",
    "0.33.0",
    "1!0.1",
    "7.2.0",
    "7.2.3",
    "7.2.4",
    "7.1.1",
    "7.2.0-1",
    "v0.10.2",
    "0.10.2.RC1",
    "0.10.2.dev383+g1234abc.rocm700",
    "0.26.1rc1.dev668+g3ee2df303",
    "7.13",
]
# The shapes the data uses: >=FIRST_AFFECTED and/or <FIRST_FIXED.
SPECS = [
    ">=0.10.2,<0.11.0",
    "<0.11.0",
    ">=0.10.1,<0.10.2",
    ">=0.15.0.dev0,<0.15.0",
    ">=0.22.0",
    ">=0.22.0,<0.29.0",
    ">=0",
    ">=7.2.0,<7.13",
    "<0.11.0rc2",
    ">=0.11.0rc1",
    "",
]


@pytest.mark.parametrize("a, b", list(itertools.combinations(VERSIONS, 2)))
def test_order_and_equality_agree_with_packaging(a: str, b: str) -> None:
    ours, ref = (Version.parse(a), Version.parse(b)), (RefVersion(a), RefVersion(b))
    assert (ours[0] < ours[1]) == (ref[0] < ref[1]), (a, b)
    assert (ours[0] == ours[1]) == (ref[0] == ref[1]), (a, b)


@pytest.mark.parametrize("spec", SPECS)
def test_final_releases_are_judged_as_pep440_judges_them(spec: str) -> None:
    """A final, post or local build: exactly PEP 440 (packaging, pre-releases allowed), the epoch aside."""
    ref = RefSet(spec, prereleases=True)
    finals = [v for v in VERSIONS if not Version.parse(v).is_prerelease]
    assert [v for v in finals if SpecifierSet(spec).contains(v) != ref.contains(v.split("!")[-1])] == []


@pytest.mark.parametrize("spec", SPECS)
def test_an_epoch_is_the_same_release(spec: str) -> None:
    """A packager's epoch (`1!0.10.2`) sorts after every version without one, but the build holds 0.10.2's code:
    judged as 0.10.2 (issue 30: it matched no row in the sidecar)."""
    for text in VERSIONS:
        base = text.split("!")[-1].lstrip("v")
        assert SpecifierSet(spec).contains("3!" + base) == SpecifierSet(spec).contains(base), (spec, text)
    with pytest.raises(InvalidSpecifier, match="no epoch"):
        SpecifierSet(">=1!0.10.2")


@pytest.mark.parametrize("spec", SPECS)
def test_a_prerelease_is_affected_when_its_final_or_itself_may_be(spec: str) -> None:
    """A pre-release or dev build of X is on the affected side of `>=B` when X (its final release) is, and of `<B`
    when the build itself is: it may already have what X brought, and may still lack it."""
    ref = RefSet(spec, prereleases=True)
    for text in (v for v in VERSIONS if Version.parse(v).is_prerelease):
        v = Version.parse(text)
        lower = [s for s in ref if s.operator == ">="]
        upper = [s for s in ref if s.operator == "<"]
        want = all(s.contains(str(v.final), prereleases=True) for s in lower) and all(
            RefVersion(str(v.public)) < RefVersion(s.version) for s in upper
        )
        assert SpecifierSet(spec).contains(v) is want, (spec, text)


@pytest.mark.parametrize(
    "spec, version, expected",
    [
        (">=0.10.2,<0.11.0", "0.10.2+rocm700", True),  # AMD's local label: that release
        (">=0.10.2,<0.11.0", "0.10.2rc1", True),  # a pre-release of the first affected release may carry the bug
        (">=0.10.2,<0.11.0", "0.10.2rc3", True),
        (">=0.10.2,<0.11.0", "0.10.2.dev383+g1234abc.rocm700", True),
        (">=0.10.1,<0.10.2", "0.10.2rc1", True),  # ... and may still lack the change 0.10.2 brought
        (">=0.10.1,<0.10.2", "0.10.1rc1", True),
        (">=0.10.1,<0.10.2", "0.10.2", False),
        ("<0.11.0", "0.11.0rc1", True),  # a dev build or rc of the fixing release is not assumed fixed
        ("<0.11.0", "0.11.0.dev5", True),
        ("<0.11.0", "0.11.0+rocm700", False),  # the fixing release itself, AMD build
        ("<0.11.0", "0.11.0.post1", False),
        ("<0.11.0", "0.11.0.post1.dev2", False),  # a dev build of a post release of the fix: after the fix
        (">=0.15.0.dev0,<0.15.0", "0.15.0.dev7+gabc", True),
        (">=0.15.0.dev0,<0.15.0", "0.15.0rc1", True),
        (">=0.15.0.dev0,<0.15.0", "0.15.0", False),
        (">=0.15.0.dev0,<0.15.0", "0.14.1", False),
        (">=0.22.0", "0.21.1rc1", False),  # a pre-release of an earlier release stays before the bound
        (">=7.2.0,<7.13", "7.2.4", True),
        (">=7.2.0,<7.13", "7.13", False),
        # issue 34: the bounds of reports made on development builds
        (">=0.16.1", "0.16.1rc1.dev234+g1d599c076", True),  # vllm#36180's build is a 0.16.1 build
        (">=0.17.0", "0.16.1rc1.dev234+g1d599c076", False),  # ... which the former bound missed
        (">=0.16.1", "0.16.0", False),
        (">=0.16.1.dev0,<0.17.0", "0.16.1rc1.dev234", True),  # dev-build-only rows: every 0.17 pre-release
        (">=0.16.1.dev0,<0.17.0", "0.17.0rc1", True),
        (">=0.16.1.dev0,<0.17.0", "0.17.0.dev12", True),
        (">=0.16.1.dev0,<0.17.0", "0.16.0", False),
        (">=0.16.1.dev0,<0.17.0", "0.17.0", False),
        (">=0.27.2.dev0,<0.28.0", "0.27.2rc1.dev92+g4d791d7ac.d20260817", True),
        (">=0.27.2.dev0,<0.28.0", "0.28.0rc1", True),
        (">=0.27.2.dev0,<0.28.0", "0.27.1", False),
        (">=0.27.2.dev0,<0.28.0", "0.28.0+rocm721", False),
        (">=0.29.0", "0.28.1rc1.dev681", False),
        (">=0.29.0", "0.29.1rc1.dev187", True),
    ],
)
def test_documented_cases(spec: str, version: str, expected: bool) -> None:
    assert SpecifierSet(spec).contains(version) is expected


@pytest.mark.parametrize(
    "bad",
    [
        "0.10.x",
        "rocm",
        "",
        "0.10.2+",
        "1.0-foo",
        "0." + "9" * 5000,
        "0.1234567890",
        "1.2.3.4.5.6.7.8.9.10.11",
        "0.10.2.dev" + "1" * 10,
        "0.10.2+" + "a" * 100,
        None,
        10,
        "1" * 4301,
    ],
)
def test_invalid_versions(bad: object) -> None:
    """Unparseable, absurd or overlong input is InvalidVersion, never another exception (int() raises ValueError
    past 4300 digits, and the chart's atoi would read an overflowing number as 0)."""
    with pytest.raises(InvalidVersion):
        Version.parse(bad)  # type: ignore[arg-type]


def test_the_bounds_are_inclusive_at_nine_digits() -> None:
    assert Version.parse("999999999.0") > Version.parse("1.0")
    assert Version.parse("0.10.2+" + "1" * 40).public == Version.parse("0.10.2")  # a long local label is ignored


@pytest.mark.parametrize(
    "bad",
    [
        "0.10.2",
        "=>0.10",
        "~=0.10",
        ">=0.10.*",
        "<0.10.2+rocm",
        ">=0.10 <0.11",
        "==0.10.2",
        "!=0.10.2",
        ">0.10.2",
        "<=0.11.0",
        ">=0." + "9" * 20,
        "<" + "1" * 500,
    ],
)
def test_invalid_specifiers(bad: str) -> None:
    """Only >=FIRST_AFFECTED and <FIRST_FIXED: every other operator has a PEP 440 special case the rules above
    would contradict."""
    with pytest.raises(InvalidSpecifier):
        SpecifierSet(bad)


def test_every_bound_in_the_data_is_one_these_rules_take() -> None:
    data = json.loads((REPO_ROOT / "known-issues" / "known-issues.json").read_text())
    specs = [r["affects"][k] for r in data["issues"] for k in ("vllm", "rocm") if r["affects"].get(k)]
    specs += [s[k] for r in data["issues"] for s in r.get("evidence_scope", []) for k in ("vllm", "rocm") if s.get(k)]
    for spec in specs:
        assert SpecifierSet(spec).bounds, spec
