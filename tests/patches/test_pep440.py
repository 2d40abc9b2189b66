"""The stdlib PEP 440 subset agrees with `packaging` (the reference implementation) on the cases that matter."""

from __future__ import annotations

import itertools

import pytest
from packaging.specifiers import SpecifierSet as RefSet
from packaging.version import Version as RefVersion
from vllm_rocm_patches.pep440 import InvalidSpecifier, InvalidVersion, SpecifierSet, Version

VERSIONS = [
    "0", "0.9.2", "0.10.0", "0.10.1", "0.10.1.1", "0.10.1.1+rocm641", "0.10.2", "0.10.2+rocm700", "0.10.2.post1",
    "0.10.2.dev5", "0.10.2rc1", "0.10.2a1", "0.10.2b2", "0.10.2rc1.dev3", "0.10.2.post1.dev1", "0.10.3",
    "0.11.0.dev0", "0.11.0.dev123+g1234abc", "0.11.0rc1", "0.11.0rc2", "0.11.0", "0.11.0+rocm721", "0.11.0.0",
    "0.11.1", "0.15.0.dev0", "0.15.0.dev7+gabc", "0.15.0rc0", "0.15.0", "0.22.1rc1.dev42+g0a1b", "0.33.0",
    "1!0.1", "7.2.0", "7.2.3", "7.2.4", "7.1.1", "7.2.0-1", "v0.10.2", "0.10.2.RC1",
]
SPECS = [
    ">=0.10.2,<0.11.0", "<0.11.0", ">=0.10.1,<0.10.2", ">=0.15.0.dev0,<0.15.0",
    ">=0.15.0.dev0,<0.15.0rc0", ">=0.22.0", ">=0.22.0,<0.29.0",
    "==0.10.2", "!=0.10.2", "==0.10.*", "!=0.10.*", "~=0.10.1", "~=0.10.1.0", ">0.10.2", "<=0.10.2", ">=0",
    "==0.10.2+rocm700", ">=7.2.0,<7.2.4", "<0.11.0rc2", ">0.10.2.post1", "==0.11", ">=0.11.0rc1", "",
]


@pytest.mark.parametrize("a, b", list(itertools.combinations(VERSIONS, 2)))
def test_order_and_equality_agree_with_packaging(a: str, b: str) -> None:
    ours, ref = (Version.parse(a), Version.parse(b)), (RefVersion(a), RefVersion(b))
    assert (ours[0] < ours[1]) == (ref[0] < ref[1]), (a, b)
    assert (ours[0] == ours[1]) == (ref[0] == ref[1]), (a, b)


@pytest.mark.parametrize("spec", SPECS)
def test_specifier_sets_agree_with_packaging(spec: str) -> None:
    ref = RefSet(spec, prereleases=True)
    ours = SpecifierSet(spec)
    mismatches = [v for v in VERSIONS if ours.contains(v) != ref.contains(v)]
    assert mismatches == [], f"{spec}: {mismatches}"


@pytest.mark.parametrize(
    "spec, version, expected",
    [
        # the cases the data relies on, spelled out
        (">=0.10.2,<0.11.0", "0.10.2+rocm700", True),  # AMD's local label is ignored
        ("<0.11.0", "0.11.0rc1", False),  # an rc of the fixing release counts as fixed (PEP 440 exclusive rule)
        ("<0.11.0", "0.11.0.dev5", False),
        (">=0.10.1,<0.10.2", "0.10.1.1", True),  # four-part release
        # "<0.15.0" never matches a pre-release of 0.15.0 (dev builds included): a row about development builds
        # must bound them with a pre-release, e.g. <0.15.0rc0
        (">=0.15.0.dev0,<0.15.0", "0.15.0.dev7+gabc", False),
        (">=0.15.0.dev0,<0.15.0rc0", "0.15.0.dev7+gabc", True),
        (">=0.15.0.dev0,<0.15.0rc0", "0.15.0rc1", False),
        (">=0.15.0.dev0,<0.15.0rc0", "0.14.1", False),
        (">0.10.2", "0.10.2.post1", False),
        (">0.10.2", "0.10.2+rocm700", False),
        (">=7.2.0,<7.2.4", "7.2.3", True),
    ],
)
def test_documented_cases(spec: str, version: str, expected: bool) -> None:
    assert SpecifierSet(spec).contains(version) is expected


@pytest.mark.parametrize("bad", ["0.10.x", "rocm", "", "0.10.2+", "1.0-foo"])
def test_invalid_versions(bad: str) -> None:
    with pytest.raises(InvalidVersion):
        Version.parse(bad)


@pytest.mark.parametrize("bad", ["0.10.2", "=>0.10", "~=1", ">=0.10.*", "<0.10.2+rocm", ">=0.10 <0.11"])
def test_invalid_specifiers(bad: str) -> None:
    with pytest.raises((InvalidSpecifier, InvalidVersion)):
        SpecifierSet(bad)
