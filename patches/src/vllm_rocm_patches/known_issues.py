"""Evaluate the known-issues data (known-issues/known-issues.json) against one vLLM configuration. Stdlib only.

One piece of code for every consumer: the patch tool (`status`), the image build (which issue ids the baked
series fixes), the health sidecar (what its log shows at run time) and the tests that keep the chart's guard
in step. The data file is the single source; its format is known-issues/schema.json and known-issues/README.md.

Semantics, per issue and condition (the chart guard must agree, row by row):
- Every condition the row sets must hold; a condition the row leaves out (null / absent) holds for anything.
- A configuration value that is unknown (None) makes that condition *unknown*: the issue is then `possible`
  (no known value contradicts it) instead of `applies`. A known value outside the row's list: `no`.
- `vllm` / `rocm`: PEP 440 specifier sets (pep440.py; pre-releases count, local labels such as +rocm700 are
  ignored). `archs`: the gfx name before any `:` feature suffix (gfx942:sramecc+:xnack- -> gfx942).
- `switches`: each `VLLM_ROCM_*` variable must have the given boolean, read as vLLM reads it
  (`value.lower() in ("true", "1")`); a variable the environment does not set takes the default from the
  data file's `switch_defaults`. An unknown environment (None) leaves every switch condition unknown.
- `kv_cache_dtypes`, `quantizations`, `speculative_methods`, `attention_backends`, `modes`: membership of the
  lower-cased / upper-cased value; the string "none" stands for "not set" (no quantization, no spec decode).
- `tensor_parallel_size`, `max_num_seqs`: inclusive `min` / `max`, and `not_multiple_of` N.
- `mitigated`: the patch this row names for the configuration's release is among the applied patches.
- `blocks(...)`: verified, `applies`, not mitigated, symptom wrong_tokens or crash, not in the allow list.
  Unverified rows are reported, never blocking.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SeriesError
from .pep440 import InvalidSpecifier, InvalidVersion, SpecifierSet, Version

ENV_DATA = "VLLM_ROCM_KNOWN_ISSUES"
DATA_NAME = "known-issues.json"
SCHEMA_VERSION = 1
SYMPTOMS = ("wrong_tokens", "crash", "oom", "hang", "slow")
BLOCKING_SYMPTOMS = ("wrong_tokens", "crash")
MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
APPLIES, POSSIBLE, NO = "applies", "possible", "no"
CONDITIONS = (
    "vllm", "rocm", "archs", "attention_backends", "switches", "kv_cache_dtypes", "quantizations",
    "speculative_methods", "tensor_parallel_size", "max_num_seqs", "modes",
)
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")


class KnownIssuesError(SeriesError, ValueError):
    """The data file is missing or malformed, or a value cannot be judged: no consumer may guess around it
    (the patch tool exits 2)."""


def default_data_path(series_dir: Path | None = None) -> Path:
    """$VLLM_ROCM_KNOWN_ISSUES, else known-issues/ next to the series directory (repository and image layout:
    <root>/patches and <root>/known-issues), else next to this package's source root."""
    env = os.environ.get(ENV_DATA)
    if env:
        return Path(env)
    candidates = []
    if series_dir is not None:
        candidates.append(Path(series_dir).resolve().parent / "known-issues" / DATA_NAME)
    # patches/src/vllm_rocm_patches/known_issues.py -> <root>/known-issues/
    candidates.append(Path(__file__).resolve().parents[3] / "known-issues" / DATA_NAME)
    for c in candidates:
        if c.is_file():
            return c
    return candidates[0]


@dataclass(frozen=True)
class Range:
    """An integer condition: inclusive bounds, and optionally "not a multiple of N"."""

    min: int | None = None
    max: int | None = None
    not_multiple_of: int | None = None

    @classmethod
    def of(cls, raw: dict[str, int]) -> Range:
        return cls(raw.get("min"), raw.get("max"), raw.get("not_multiple_of"))

    def contains(self, n: int) -> bool:
        return (
            (self.min is None or n >= self.min)
            and (self.max is None or n <= self.max)
            and (self.not_multiple_of is None or n % self.not_multiple_of != 0)
        )

    def __str__(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min}")
        if self.max is not None:
            parts.append(f"<= {self.max}")
        if self.not_multiple_of is not None:
            parts.append(f"not a multiple of {self.not_multiple_of}")
        return " and ".join(parts)


@dataclass
class Issue:
    id: str
    title: str
    symptom: str
    verified: bool
    affects: dict[str, Any]
    raw: dict[str, Any]
    vllm: SpecifierSet
    rocm: SpecifierSet | None
    patches: dict[str, str] = field(default_factory=dict)  # release -> patch file name in vllm-<release>/

    @property
    def first_fixed(self) -> str | None:
        return (self.raw.get("fix") or {}).get("first_release")

    @property
    def mitigation(self) -> dict[str, Any]:
        return self.raw.get("mitigation") or {}

    def patch_id(self, release: str) -> str | None:
        name = self.patches.get(release)
        return f"vllm-{release}/{name}" if name else None

    def advice(self) -> str:
        m = self.mitigation
        parts = []
        if m.get("safe_modes"):
            parts.append("cudagraph_mode " + " or ".join(m["safe_modes"]))
        if m.get("env"):
            parts.append(", ".join(f"{k}={v}" for k, v in m["env"].items()))
        if self.patches:
            parts.append("the series' patch (" + ", ".join(f"vLLM {r}" for r in sorted(self.patches)) + ")")
        if self.first_fixed:
            parts.append(f"vLLM >= {self.first_fixed}")
        text = m.get("advice", "")
        return (text + (" " if text else "") + ("Options: " + "; ".join(parts) + "." if parts else "")).strip()


@dataclass
class Config:
    """One vLLM deployment as far as it is known. None = unknown (the sidecar rarely knows everything)."""

    release: str | None = None
    rocm: str | None = None
    arch: str | None = None
    attention_backend: str | None = None
    env: dict[str, str] | None = None  # the VLLM_ROCM_* environment (unset names take their defaults)
    kv_cache_dtype: str | None = None
    quantization: str | None = None  # "none" = unquantized
    speculative_method: str | None = None  # "none" = no speculative decoding
    tensor_parallel_size: int | None = None
    max_num_seqs: int | None = None
    mode: str | None = None  # cudagraph_mode as vLLM runs it (NONE for --enforce-eager)
    patches: frozenset[str] = frozenset()  # applied patch ids, "vllm-0.10.2/0001-....patch"


@dataclass
class Match:
    issue: Issue
    status: str  # applies | possible | no
    unknown: list[str]  # conditions the configuration could not decide
    failed: list[str]  # conditions a known value contradicts
    mitigated_by: str | None

    @property
    def mitigated(self) -> bool:
        return self.mitigated_by is not None

    @property
    def active(self) -> bool:
        """Applies and nothing in the configuration mitigates it."""
        return self.status == APPLIES and not self.mitigated

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.issue.id, "title": self.issue.title, "symptom": self.issue.symptom,
            "verified": self.issue.verified, "status": self.status, "unknown": self.unknown,
            "mitigated_by": self.mitigated_by, "active": self.active, "advice": self.issue.advice(),
        }


@dataclass
class KnownIssues:
    path: Path
    issues: list[Issue]
    switch_defaults: dict[str, bool]

    def get(self, issue_id: str) -> Issue:
        for i in self.issues:
            if i.id == issue_id:
                return i
        raise KeyError(issue_id)

    def evaluate(self, cfg: Config) -> list[Match]:
        return [self.match(i, cfg) for i in self.issues]

    def match(self, issue: Issue, cfg: Config) -> Match:
        unknown: list[str] = []
        failed: list[str] = []
        for cond in CONDITIONS:
            verdict = self._condition(issue, cond, cfg)
            if verdict is None:
                unknown.append(cond)
            elif verdict is False:
                failed.append(cond)
        status = NO if failed else POSSIBLE if unknown else APPLIES
        mitigated_by = None
        if cfg.release is not None:
            pid = issue.patch_id(_public(cfg.release))
            if pid and pid in cfg.patches:
                mitigated_by = pid
        return Match(issue, status, unknown, failed, mitigated_by)

    def blocking(self, cfg: Config, allow: tuple[str, ...] | list[str] = ()) -> list[Match]:
        """What a deploy-time guard refuses: verified, applies, unmitigated wrong_tokens / crash rows."""
        return [
            m for m in self.evaluate(cfg)
            if m.issue.verified and m.active and m.issue.symptom in BLOCKING_SYMPTOMS and m.issue.id not in allow
        ]

    def fixed_by(self, patch_ids: list[str] | set[str] | frozenset[str]) -> list[str]:
        """The issue ids a set of patches fixes (for image labels and reports)."""
        ids = set(patch_ids)
        return [i.id for i in self.issues if any(i.patch_id(r) in ids for r in i.patches)]

    def _condition(self, issue: Issue, cond: str, cfg: Config) -> bool | None:
        a = issue.affects
        if cond == "vllm":
            return None if cfg.release is None else issue.vllm.contains(_version(cfg.release, "vLLM release"))
        if cond == "rocm":
            if issue.rocm is None:
                return True
            return None if cfg.rocm is None else issue.rocm.contains(_version(cfg.rocm, "ROCm version"))
        if a.get(cond) is None:
            return True
        want = a[cond]
        if cond == "switches":
            if cfg.env is None:
                return None
            return all(self.switch(name, cfg.env) == value for name, value in want.items())
        if cond in ("tensor_parallel_size", "max_num_seqs"):
            n = getattr(cfg, cond)
            return None if n is None else Range.of(want).contains(int(n))
        value = {
            "archs": normalize_arch(cfg.arch),
            "attention_backends": _upper(cfg.attention_backend),
            "modes": _upper(cfg.mode),
            "kv_cache_dtypes": _lower(cfg.kv_cache_dtype),
            "quantizations": _lower(cfg.quantization),
            "speculative_methods": _lower(cfg.speculative_method),
        }[cond]
        return None if value is None else value in want

    def switch(self, name: str, env: dict[str, str]) -> bool:
        if name in env:
            return str(env[name]).strip().lower() in ("true", "1")
        return self.switch_defaults[name]


def normalize_arch(arch: str | None) -> str | None:
    return None if arch is None else arch.split(":", 1)[0].strip().lower()


def _upper(v: str | None) -> str | None:
    return None if v is None else v.strip().upper()


def _lower(v: str | None) -> str | None:
    return None if v is None else v.strip().lower()


def _public(release: str) -> str:
    return release.split("+", 1)[0]


def _version(text: str, what: str) -> Version:
    try:
        return Version.parse(text)
    except InvalidVersion as exc:
        raise KnownIssuesError(f"{what} {text!r} is not a PEP 440 version: {exc}") from None


def default_mode(release: str) -> str:
    """vLLM's cudagraph_mode when none is given (shared notes: PIECEWISE up to 0.10.x, then FULL_AND_PIECEWISE)."""
    return "PIECEWISE" if _version(release, "vLLM release") < Version.parse("0.11.0.dev0") else "FULL_AND_PIECEWISE"


def load(path: Path | None = None, series_dir: Path | None = None) -> KnownIssues:
    path = Path(path) if path is not None else default_data_path(series_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnownIssuesError(f"known-issues data {path} not found (set {ENV_DATA})") from None
    except json.JSONDecodeError as exc:
        raise KnownIssuesError(f"{path}: invalid JSON: {exc}") from None
    return parse(data, path)


def parse(data: Any, path: Path) -> KnownIssues:
    """Structural checks the stdlib can make (the full JSON schema is checked in tests): a file that parses
    here gives every consumer the same answers."""

    def bad(msg: str) -> KnownIssuesError:
        return KnownIssuesError(f"{path}: {msg}")

    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise bad(f"not a known-issues file of schema_version {SCHEMA_VERSION}")
    defaults = data.get("switch_defaults")
    if not isinstance(defaults, dict) or not all(isinstance(v, bool) for v in defaults.values()):
        raise bad("switch_defaults must map VLLM_ROCM_* names to booleans")
    issues: list[Issue] = []
    seen: set[str] = set()
    for raw in data.get("issues", []):
        iid = raw.get("id", "") if isinstance(raw, dict) else ""
        if not _ID_RE.match(iid) or iid in seen:
            raise bad(f"issue id {iid!r} is missing, malformed or repeated")
        seen.add(iid)
        a = raw.get("affects")
        if not isinstance(a, dict) or not a.get("vllm") or not a.get("modes"):
            raise bad(f"{iid}: affects.vllm and affects.modes are required")
        unknown_keys = set(a) - set(CONDITIONS)
        if unknown_keys:
            raise bad(f"{iid}: unknown conditions {sorted(unknown_keys)}")
        if raw.get("symptom") not in SYMPTOMS:
            raise bad(f"{iid}: symptom must be one of {SYMPTOMS}")
        if not isinstance(raw.get("verified"), bool):
            raise bad(f"{iid}: verified must be true or false")
        if raw["verified"] and not raw.get("checks"):
            raise bad(f"{iid}: a verified row must say what was checked")
        if any(m not in MODES for m in a["modes"]):
            raise bad(f"{iid}: modes must be among {MODES}")
        for name in (a.get("switches") or {}):
            if name not in defaults:
                raise bad(f"{iid}: switch {name} has no entry in switch_defaults")
        try:
            vllm = SpecifierSet(a["vllm"])
            rocm = SpecifierSet(a["rocm"]) if a.get("rocm") else None
            for rel in (raw.get("mitigation") or {}).get("patches", {}):
                Version.parse(rel)
            first = (raw.get("fix") or {}).get("first_release")
            if first:
                Version.parse(first)
        except (InvalidSpecifier, InvalidVersion) as exc:
            raise bad(f"{iid}: {exc}") from None
        patches = dict((raw.get("mitigation") or {}).get("patches", {}))
        issues.append(Issue(iid, raw.get("title", ""), raw["symptom"], raw["verified"], a, raw, vllm, rocm, patches))
    return KnownIssues(path, issues, dict(defaults))


def release_report(ki: KnownIssues, release: str, patch_states: dict[str, str]) -> list[dict[str, Any]]:
    """What `vllm-rocm-patches status` lists for one release, every other condition unknown.

    `patch_states` maps the release's patch ids to the tool's state (applied / applicable / conflict ...).
    Each row: `fixed-by-series` (the series holds its patch; `patch_state` says whether it is applied),
    `fixed-upstream` (an earlier release was affected, this one has the fix), `unmitigated` (this release is
    affected and the series has no patch: the advice says what to do) or `not-affected`.
    """
    v = _version(release, "vLLM release")
    out = []
    for issue in ki.issues:
        row: dict[str, Any] = {
            "id": issue.id, "title": issue.title, "symptom": issue.symptom, "verified": issue.verified,
            "conditions": describe_conditions(issue),
        }
        if issue.vllm.contains(v):
            pid = issue.patch_id(_public(release))
            if pid is not None:
                row.update(state="fixed-by-series", patch=pid, patch_state=patch_states.get(pid, "missing"))
            else:
                row.update(state="unmitigated", advice=issue.advice())
        elif issue.first_fixed and v >= Version.parse(issue.first_fixed):
            row.update(state="fixed-upstream", first_release=issue.first_fixed)
        else:
            row.update(state="not-affected")
        out.append(row)
    return out


def describe_conditions(issue: Issue) -> str:
    """The row's trigger in words, e.g. `ROCM_AITER_FA, kv-cache fp8, gfx950, modes FULL`."""
    a = issue.affects
    parts = []
    if a.get("attention_backends"):
        parts.append("/".join(a["attention_backends"]))
    for name, value in (a.get("switches") or {}).items():
        parts.append(f"{name}={int(value)}")
    labels = {"kv_cache_dtypes": "kv-cache", "quantizations": "quantization", "speculative_methods": "spec decode",
              "archs": "arch"}
    for key, label in labels.items():
        if a.get(key):
            parts.append(f"{label} {'/'.join(a[key])}")
    for key, label in (("tensor_parallel_size", "TP"), ("max_num_seqs", "max-num-seqs")):
        if a.get(key):
            parts.append(f"{label} {Range.of(a[key])}")
    if a.get("rocm"):
        parts.append(f"ROCm {a['rocm']}")
    modes = a["modes"]
    parts.append("any cudagraph mode" if set(modes) == set(MODES) else "modes " + "/".join(modes))
    return ", ".join(parts)


README_START = "<!-- known-issues-table:start (generated by `vllm-rocm-patches known-issues --write-readme`) -->"
README_END = "<!-- known-issues-table:end -->"


def markdown_table(ki: KnownIssues) -> str:
    """The README table: one line per row, in file order."""
    lines = [
        "| id | symptom | vLLM | when | fixed upstream | in this distribution | verified |",
        "|---|---|---|---|---|---|---|",
    ]
    for i in ki.issues:
        fix = i.raw.get("fix") or {}
        upstream = f"{fix['first_release']} ([{_short_link(fix['upstream'])}]({fix['upstream']}))" if (
            fix.get("first_release") and fix.get("upstream")) else (fix.get("state") or "no")
        if i.patches:
            ours = "patch for " + ", ".join(f"`vllm-{r}/{n.split('-', 1)[0]}`" for r, n in sorted(i.patches.items()))
        elif i.mitigation.get("safe_modes"):
            ours = "safe mode " + "/".join(i.mitigation["safe_modes"])
        else:
            ours = i.mitigation.get("advice", "-")
        if i.verified and i.mitigation.get("refuse") and i.symptom in BLOCKING_SYMPTOMS:
            ours += "; refused unless mitigated"
        cells = [f"[`{i.id}`]({i.raw['links'][0]})", i.symptom, f"`{i.affects['vllm']}`", describe_conditions(i),
                 upstream, ours, "yes" if i.verified else "no"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _short_link(url: str) -> str:
    m = re.match(r"https://github.com/([^/]+)/([^/]+)/(?:pull|issues)/(\d+)", url)
    if not m:
        return url
    return f"#{m.group(3)}" if m.group(1, 2) == ("vllm-project", "vllm") else f"{m.group(2)}#{m.group(3)}"


def replace_readme_block(text: str, table: str) -> str:
    """`text` with the block between the README markers replaced by `table` (markers must be present once)."""
    if text.count(README_START) != 1 or text.count(README_END) != 1:
        raise KnownIssuesError(f"the README needs exactly one {README_START!r} ... {README_END!r} block")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_START}\n{table}{README_END}{tail}"


# Versions tried, in order, when a row's trigger needs a release / ROCm version inside its specifiers.
_RELEASE_CANDIDATES = (
    "0.10.1.1", "0.10.2", "0.11.0", "0.14.0", "0.15.0.dev1", "0.19.0", "0.20.0", "0.22.1", "0.26.0", "0.28.0",
    "0.29.0", "0.30.0", "0.33.0", "0.9.2",
)
_ROCM_CANDIDATES = ("7.0.0", "7.1.1", "7.2.0", "7.2.3", "6.4.1")


def example_config(issue: Issue, patches: frozenset[str] = frozenset()) -> Config:
    """A fully known configuration that triggers `issue` (its first value of every condition): what a test renders
    to check that every consumer (chart guard, sidecar) agrees with this evaluator row by row."""
    a = issue.affects
    release = next((v for v in _RELEASE_CANDIDATES if issue.vllm.contains(v)), None)
    rocm = next((v for v in _ROCM_CANDIDATES if issue.rocm is None or issue.rocm.contains(v)), None)
    if release is None or rocm is None:
        raise KnownIssuesError(f"{issue.id}: no candidate release / ROCm version satisfies its specifiers")

    def first(key: str, default: str) -> str:
        return a[key][0] if a.get(key) else default

    def number(key: str, default: int) -> int:
        r = Range.of(a[key]) if a.get(key) else Range()
        n = r.min if r.min is not None else default
        while not r.contains(n):
            n += 1
        return n

    return Config(
        release=release, rocm=rocm, arch=first("archs", "gfx942"), attention_backend=first("attention_backends",
        "TRITON_ATTN"), env={k: "1" if v else "0" for k, v in (a.get("switches") or {}).items()},
        kv_cache_dtype=first("kv_cache_dtypes", "auto"), quantization=first("quantizations", "none"),
        speculative_method=first("speculative_methods", "none"), tensor_parallel_size=number("tensor_parallel_size", 1),
        max_num_seqs=number("max_num_seqs", 100 if a.get("max_num_seqs") else 256), mode=a["modes"][0],
        patches=patches,
    )
