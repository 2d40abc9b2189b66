"""PEP 440 versions as vLLM and ROCm spell them, and the version bounds of the known-issues data. Stdlib only.

The patch tool runs inside base images where nothing may be installed, so `packaging` is not available. `Version`
parses and orders versions as `packaging.version.Version` does (tests/known_issues/test_pep440.py checks it against
`packaging` on four-part releases such as 0.10.1.1, a/b/rc, .post, .dev, epochs and local labels such as
+rocm700).

`SpecifierSet` is deliberately not PEP 440's: the known-issues data bounds a row by the first release that has the
bug (`>=X`) and the first release that has the fix (`<Y`), and a build is judged as the release it belongs to,
conservatively:

- a final release, a post release and a local build (`0.10.2`, `0.10.2.post1`, `0.10.2+rocm700`) are that public
  version (the local label is ignored: AMD's builds of a release are that release); so is a build with an epoch
  (`1!0.10.2`): a packager's epoch reorders versions, it does not change which release's code the build holds;
- a pre-release or development build (`0.10.2rc1`, `0.10.2.dev383+g1234abc.rocm700`) was cut somewhere before its
  final release and cannot say which changes of that release it holds, so both bounds assume the worst: `>=X`
  holds when its final release is X or later (it may already carry the bug), `<Y` holds while the build itself
  sorts before Y (a dev build or rc of the fixing release is not assumed fixed).

Only `>=` and `<` are accepted: every other operator either cannot express "first affected" / "first fixed" or
has a PEP 440 special case (`>V` skipping post releases, `<V` skipping V's pre-releases) that contradicts the rule
above. The Helm chart's templates implement the same rules (charts/vllm-rocm/templates/_known_issues.tpl); a test
compares the two on every bound of the data in rc, dev, post and local spellings.

Input is bounded: at most 100 characters, 10 release numbers and 9 digits per number of the public version (the
chart compares numbers as float64, and Python's int() refuses more than 4300 digits); anything else is
`InvalidVersion`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

MAX_LENGTH = 100
MAX_RELEASE_NUMBERS = 10
MAX_DIGITS = 9
OPERATORS = (">=", "<")

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
_SPEC_RE = re.compile(r"^\s*(>=|<)\s*([0-9][^\s,;]*)\s*$")


class InvalidVersion(ValueError):
    pass


class InvalidSpecifier(ValueError):
    pass


def _strip_zeros(release: tuple[int, ...]) -> tuple[int, ...]:
    r = list(release)
    while len(r) > 1 and r[-1] == 0:
        r.pop()
    return tuple(r)


def _number(text: str, original: str) -> int:
    if len(text) > MAX_DIGITS:
        raise InvalidVersion(f"{original!r}: the number {text[:12]}... has more than {MAX_DIGITS} digits")
    return int(text)


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
        if not isinstance(text, str):
            raise InvalidVersion(f"{text!r} is not a version string")
        if len(text) > MAX_LENGTH:
            raise InvalidVersion(f"{text[:40]!r}... is longer than {MAX_LENGTH} characters")
        m = _VERSION_RE.match(text)
        if not m:
            raise InvalidVersion(f"{text!r} is not a PEP 440 version")
        parts = m["release"].split(".")
        if len(parts) > MAX_RELEASE_NUMBERS:
            raise InvalidVersion(f"{text!r} has more than {MAX_RELEASE_NUMBERS} release numbers")
        release = tuple(_number(p, text) for p in parts)
        pre = (_PRE[m["pre_l"].lower()], _number(m["pre_n"] or "0", text)) if m["pre_l"] else None
        if m["post_n1"] is not None:
            post: int | None = _number(m["post_n1"], text)
        elif m["post_l"]:
            post = _number(m["post_n2"] or "0", text)
        else:
            post = None
        dev = _number(m["dev_n"] or "0", text) if m["dev_l"] else None
        local = (
            # local segments are ignored by every comparison here; their length is bounded by MAX_LENGTH
            tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"[-_.]", m["local"])) if m["local"] else None
        )
        return cls(_number(m["epoch"] or "0", text), release, pre, post, dev, local, text.strip())

    @property
    def public(self) -> Version:
        return Version(self.epoch, self.release, self.pre, self.post, self.dev, None, self.text.split("+", 1)[0])

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    @property
    def final(self) -> Version:
        """The release a pre-release or development build leads to (0.10.2rc1 -> 0.10.2, 0.10.2.post1.dev3 ->
        0.10.2.post1); any other version's public version."""
        if self.pre is not None:
            return Version(self.epoch, self.release, None, None, None, None, ".".join(map(str, self.release)))
        if self.dev is not None:
            text = ".".join(map(str, self.release)) + (f".post{self.post}" if self.post is not None else "")
            return Version(self.epoch, self.release, None, self.post, None, None, text)
        return self.public

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
class Bound:
    """One comparison of a specifier set: `>=X` (X is the first release with the bug) or `<Y` (Y has the fix)."""

    op: str
    version: Version

    def admits(self, v: Version) -> bool:
        """Whether a build of version `v` may be on the affected side of this bound (module docstring)."""
        if v.epoch:
            v = Version(0, v.release, v.pre, v.post, v.dev, v.local, v.text.split("!", 1)[1])
        if self.op == ">=":
            return v.final >= self.version
        return v.public < self.version

    def __str__(self) -> str:
        return f"{self.op}{self.version}"


class SpecifierSet:
    """Comma-separated `>=X` / `<Y` bounds, all of which must admit a version. The empty set admits every version."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or len(text) > 4 * MAX_LENGTH:
            raise InvalidSpecifier(f"{str(text)[:40]!r} is not a specifier set")
        self.text = text
        self.bounds: list[Bound] = []
        for part in (p for p in text.split(",") if p.strip()):
            m = _SPEC_RE.match(part)
            if not m:
                raise InvalidSpecifier(
                    f"{part.strip()!r} in {text!r}: the known-issues data bounds rows with >=FIRST_AFFECTED and"
                    " <FIRST_FIXED only"
                )
            try:
                version = Version.parse(m.group(2))
            except InvalidVersion as exc:
                raise InvalidSpecifier(f"{part.strip()!r} in {text!r}: {exc}") from None
            if version.local is not None:
                raise InvalidSpecifier(f"{part.strip()!r} in {text!r}: a bound takes no local label")
            if version.epoch:
                raise InvalidSpecifier(f"{part.strip()!r} in {text!r}: a bound takes no epoch")
            self.bounds.append(Bound(m.group(1), version))

    def contains(self, version: str | Version) -> bool:
        v = version if isinstance(version, Version) else Version.parse(version)
        return all(b.admits(v) for b in self.bounds)

    def __str__(self) -> str:
        return self.text
