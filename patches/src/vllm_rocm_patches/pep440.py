"""The part of PEP 440 the known-issues data needs: versions and specifier sets, stdlib only.

The patch tool runs inside base images where nothing may be installed, so `packaging` is not available; this
module implements what `packaging.specifiers.SpecifierSet(spec, prereleases=True).contains(v)` does for the
operators `== != < <= > >= ~=` and `==X.*` / `!=X.*` (not `===`). tests/patches/test_pep440.py checks it
against `packaging` on edge cases: four-part releases (0.10.1.1), a/b/rc, .post, .dev, epochs and local
versions such as `0.10.2+rocm700`.

Pre-releases are always allowed (an installed 0.11.0rc1 is a version like any other), but the exclusive
comparisons keep PEP 440's rules: `<0.11.0` does not match 0.11.0rc1 or 0.11.0.dev5 (pre-releases of the
named version), `>0.10.2` does not match 0.10.2.post1 or 0.10.2+rocm700.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_VERSION_RE = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>\d+)!)?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>a|alpha|b|beta|rc|c|pre|preview)[-_.]?(?P<pre_n>\d+)?)?
    (?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "rc": "rc", "c": "rc", "pre": "rc", "preview": "rc"}
_SPEC_RE = re.compile(r"^\s*(~=|==|!=|<=|>=|<|>)\s*([^\s,;]+)\s*$")


class InvalidVersion(ValueError):
    pass


class InvalidSpecifier(ValueError):
    pass


def _strip_zeros(release: tuple[int, ...]) -> tuple[int, ...]:
    r = list(release)
    while len(r) > 1 and r[-1] == 0:
        r.pop()
    return tuple(r)


@total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    epoch: int
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: tuple[int | str, ...] | None
    text: str

    @classmethod
    def parse(cls, text: str) -> Version:
        m = _VERSION_RE.match(str(text))
        if not m:
            raise InvalidVersion(f"{text!r} is not a PEP 440 version")
        pre = (_PRE[m["pre_l"].lower()], int(m["pre_n"] or 0)) if m["pre_l"] else None
        if m["post_n1"] is not None:
            post: int | None = int(m["post_n1"])
        elif m["post_l"]:
            post = int(m["post_n2"] or 0)
        else:
            post = None
        dev = int(m["dev_n"] or 0) if m["dev_l"] else None
        local = (
            tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"[-_.]", m["local"]))
            if m["local"]
            else None
        )
        return cls(int(m["epoch"] or 0), tuple(int(x) for x in m["release"].split(".")), pre, post, dev, local, text)

    @property
    def public(self) -> Version:
        return Version(self.epoch, self.release, self.pre, self.post, self.dev, None, self.text.split("+", 1)[0])

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    @property
    def base(self) -> tuple[int, tuple[int, ...]]:
        return self.epoch, _strip_zeros(self.release)

    def _key(self) -> tuple:
        # PEP 440 order: X.devN < XaN < XbN < XrcN < X < X.postN; a dev of a pre/post sorts just before it.
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple = (-1, "", 0)  # 1.0.dev0 sorts before 1.0a0
        elif self.pre is None:
            pre = (1, "", 0)
        else:
            pre = (0, *self.pre)
        post = (-1,) if self.post is None else (0, self.post)
        dev = (1, 0) if self.dev is None else (0, self.dev)
        local: tuple = ()
        if self.local is not None:  # numeric segments sort after alphanumeric ones
            local = tuple((1, p, "") if isinstance(p, int) else (0, 0, p) for p in self.local)
            local = (1, *local)
        else:
            local = (0,)
        return self.epoch, _strip_zeros(self.release), pre, post, dev, local

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Specifier:
    op: str
    version: str  # as written, may end in .* for == / !=

    def contains(self, v: Version) -> bool:
        op, text = self.op, self.version
        if text.endswith(".*"):
            return (op == "==") == _prefix_match(v, text[:-2])
        spec = Version.parse(text)
        if op in ("==", "!="):
            # A specifier without a local label ignores the candidate's local label.
            cand = v if spec.local is not None else v.public
            return (op == "==") == (cand == spec)
        cand = v.public
        if op == "<=":
            return cand <= spec
        if op == ">=":
            return cand >= spec
        if op == "<":
            if not cand < spec:
                return False
            # <V never matches a pre-release of V itself unless V is a pre-release.
            return spec.is_prerelease or not (cand.is_prerelease and cand.base == spec.base)
        if op == ">":
            if not cand > spec:
                return False
            # >V never matches a post-release of V unless V is one, nor a local version of V.
            if spec.post is None and cand.post is not None and cand.base == spec.base:
                return False
            return True
        # ~=X.Y.Z  ==  >=X.Y.Z, ==X.Y.*
        prefix = ".".join(str(x) for x in spec.release[:-1])
        return cand >= spec and _prefix_match(v, prefix)


def _prefix_match(v: Version, prefix: str) -> bool:
    p = Version.parse(prefix)
    cand = v.public
    n = len(p.release)
    release = cand.release + (0,) * max(0, n - len(cand.release))
    return cand.epoch == p.epoch and release[:n] == p.release


class SpecifierSet:
    """Comma-separated specifiers, all of which must hold. The empty set matches every version."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.specs: list[Specifier] = []
        for part in (p for p in text.split(",") if p.strip()):
            m = _SPEC_RE.match(part)
            if not m:
                raise InvalidSpecifier(f"{part.strip()!r} in {text!r} is not a PEP 440 specifier")
            op, ver = m.group(1), m.group(2)
            if ver.endswith(".*"):
                if op not in ("==", "!="):
                    raise InvalidSpecifier(f"{part.strip()!r}: a .* suffix needs == or !=")
                Version.parse(ver[:-2])
            else:
                parsed = Version.parse(ver)
                if op == "~=" and len(parsed.release) < 2:
                    raise InvalidSpecifier(f"{part.strip()!r}: ~= needs at least two release numbers")
                if parsed.local is not None and op not in ("==", "!="):
                    raise InvalidSpecifier(f"{part.strip()!r}: only == and != take a local version")
            self.specs.append(Specifier(op, ver))

    def contains(self, version: str | Version) -> bool:
        v = version if isinstance(version, Version) else Version.parse(version)
        return all(s.contains(v) for s in self.specs)

    def __str__(self) -> str:
        return self.text
