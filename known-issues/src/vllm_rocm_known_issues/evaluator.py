"""Evaluate the known-issues data (known-issues/known-issues.json) against one vLLM configuration. Stdlib only.

One piece of code for every consumer: the patch tool (`status`, `known-issues`), the image build (which issue ids
the baked series fixes), the health sidecar (what its log shows at run time) and the tests that keep the chart's
guard in step. The data file is the single source; its format is known-issues/schema.json and known-issues/README.md.

Public API (what a consumer calls): `load()` -> `KnownIssues`; `KnownIssues.evaluate(Config)` / `.match()` /
`.blocking()`; `infer_attention_backend()` (vLLM's automatic choice, the one the chart makes too);
`canonical_attention_backend()` (any release's spelling -> one name); `KnownIssuesError` for anything that cannot
be judged.

Semantics, per issue and condition (the chart guard must agree, row by row):
- Every condition the row's `affects` sets must hold; a condition left out (null / absent) holds for anything.
- A configuration value that is unknown (None) makes that condition *unknown*: the issue is then `possible`
  (no known value contradicts it) instead of `applies`. A known value outside the row's list: `no`.
- `vllm` / `rocm`: `>=FIRST_AFFECTED` / `<FIRST_FIXED` bounds (pep440.py): final, post and local builds are their
  release; a pre-release or dev build is on the affected side of both bounds when it may be (a dev build of the
  fixing release is not assumed fixed).
- `archs`: the gfx name before any `:` feature suffix (gfx942:sramecc+:xnack- -> gfx942).
- `attention_backends`: vLLM's enum names; the configuration's backend may be in any release's spelling
  (`canonical_attention_backend`); a name this module does not know is unknown, never a mismatch.
- `switches`: each `VLLM_*` variable must have the given value, read as vLLM reads it (booleans:
  `value.lower() in ("true", "1")`; strings: case-insensitive); a variable the environment does not set takes the
  default from the data file's `switch_defaults`. An unknown environment (None) leaves every switch unknown.
- `architectures` (the model's architecture class, as vLLM resolves it), `kv_cache_dtypes`, `quantizations`,
  `speculative_methods`, `modes`: membership of the value; the string "none" stands for "not set" (no
  quantization, no spec decode).
- `tensor_parallel_size`, `max_num_seqs`: inclusive `min` / `max`, and `not_multiple_of` N.
- `evidence_scope` (optional): the configurations the reports actually cover, as alternatives (each a map of the
  same conditions). A configuration every `affects` condition holds for but that is inside no alternative is
  `possible` (reported, never refused): the code says it could happen, no report says it does.
- `mitigated`: the patch this row names for the configuration's release is among the applied patches.
- `blocking(...)`: verified, `applies`, not mitigated, symptom wrong_tokens or crash, not in the allow list.
  Unverified rows are reported, never blocking.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .pep440 import InvalidSpecifier, InvalidVersion, SpecifierSet, Version

ENV_DATA = "VLLM_ROCM_KNOWN_ISSUES"
DATA_NAME = "known-issues.json"
SCHEMA_VERSION = 2
SYMPTOMS = ("wrong_tokens", "crash", "oom", "hang", "slow")
BLOCKING_SYMPTOMS = ("wrong_tokens", "crash")
# vLLM's CUDAGraphMode names: the one list (the sidecar, qualify and the tests import it; tests/known_issues/
# test_modes.py keeps the schemas' enums and the chart's list equal to it).
MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
APPLIES, POSSIBLE, NO = "applies", "possible", "no"
INSIDE, OUTSIDE, UNDECIDED = "inside", "outside", "undecided"  # a configuration against a row's evidence_scope
CONDITIONS = (
    "vllm",
    "rocm",
    "archs",
    "attention_backends",
    "switches",
    "architectures",
    "kv_cache_dtypes",
    "quantizations",
    "speculative_methods",
    "tensor_parallel_size",
    "max_num_seqs",
    "modes",
)
LIST_CONDITIONS = (
    "archs",
    "attention_backends",
    "architectures",
    "kv_cache_dtypes",
    "quantizations",
    "speculative_methods",
    "modes",
)
RANGE_CONDITIONS = ("tensor_parallel_size", "max_num_seqs")
# The Config field each condition reads.
FIELDS = {
    "vllm": "release",
    "rocm": "rocm",
    "archs": "arch",
    "attention_backends": "attention_backend",
    "switches": "env",
    "architectures": "architecture",
    "kv_cache_dtypes": "kv_cache_dtype",
    "quantizations": "quantization",
    "speculative_methods": "speculative_method",
    "tensor_parallel_size": "tensor_parallel_size",
    "max_num_seqs": "max_num_seqs",
    "modes": "mode",
}
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_SWITCH_RE = re.compile(r"^VLLM_[A-Z0-9_]+$")
_MAX_TEXT = 200  # longest configuration string judged; a longer one is an error, not a guess


class KnownIssuesError(ValueError):
    """The data file is missing or malformed, or a value cannot be judged: no consumer may guess around it
    (the patch tool exits 2)."""


def default_data_path(series_dir: Path | None = None) -> Path:
    """$VLLM_ROCM_KNOWN_ISSUES, else known-issues/ next to the series directory (repository and image layout:
    <root>/patches and <root>/known-issues), else the installed wheel's copy (package data `data/`, which
    pyproject.toml maps to the repository's known-issues/), else next to this package's source root (a checkout)."""
    env = os.environ.get(ENV_DATA)
    if env:
        return Path(env)
    candidates = []
    if series_dir is not None:
        candidates.append(Path(series_dir).resolve().parent / "known-issues" / DATA_NAME)
    here = Path(__file__).resolve()
    # known-issues/src/vllm_rocm_known_issues/evaluator.py -> known-issues/ (a checkout, and the ROCm image's layout)
    checkout = here.parents[2] / DATA_NAME if here.parents[1].name == "src" else None
    packaged = importlib.resources.files(__package__ or "vllm_rocm_known_issues") / "data" / DATA_NAME
    if isinstance(packaged, Path):  # an installed wheel (not a zip import)
        candidates.append(packaged)
    if checkout is not None:
        candidates.append(checkout)
    for c in candidates:
        if c.is_file():
            return c
    # Nothing found: name this package's own copy as the missing one.
    return checkout or (candidates[-1] if candidates else Path(DATA_NAME))


# --- attention backends ----------------------------------------------------------------------------------------

# Every AttentionBackendEnum / _Backend name of vLLM 0.10.0-0.34.0 (platforms/interface.py up to 0.11,
# attention/backends/registry.py 0.12-0.13, v1/attention/backends/registry.py from 0.14), after the aliases below.
BACKEND_NAMES = frozenset(
    {
        "AMX_MLA",
        "B12X",
        "CPU_ATTN",
        "CPU_MLA",
        "CUSTOM",
        "CUTLASS_MLA",
        "CUTLASS_MSA",
        "DIFFERENTIAL_FLASH_ATTN",
        "DUAL_CHUNK_FLASH_ATTN",
        "FLASHINFER",
        "FLASHINFER_MLA",
        "FLASHINFER_MLA_SPARSE",
        "FLASHINFER_MLA_SPARSE_DSV4",
        "FLASHINFER_MLA_SPARSE_DSV41",
        "FLASHINFER_MLA_SPARSE_SM120",
        "FLASHINFER_MLA_SPARSE_SM90",
        "FLASHINFER_TS",
        "FLASHMLA",
        "FLASHMLA_MEGA_ATTN_DSV41",
        "FLASHMLA_SPARSE",
        "FLASHMLA_SPARSE_DSV4",
        "FLASHMLA_SPARSE_DSV41",
        "FLASH_ATTN_DIFFKV",
        "FLASH_ATTN_MLA",
        "FLASH_ATTN_MLA_SPARSE",
        "FLASH_ATTN_MLA_SPARSE_FA4",
        "FLEX_ATTENTION",
        "HPC_ATTN",
        "IPEX",
        "KIMI_K3_KV_BALANCED_MLA",
        "MINIMAX_M3_SPARSE",
        "NO_ATTENTION",
        "PALLAS",
        "ROCM_AITER_FA",
        "ROCM_AITER_MLA",
        "ROCM_AITER_MLA_SPARSE",
        "ROCM_AITER_TRITON_MLA",
        "ROCM_AITER_UNIFIED_ATTN",
        "ROCM_ATTN",
        "ROCM_FLASH",
        "ROCM_FLASHMLA_SPARSE_DSV4",
        "ROCM_FLASHMLA_SPARSE_DSV41",
        "ROCM_OCTAVE",
        "ROCM_SEGMENTED_ATTN",
        "STEP5_DSA",
        "TOKENSPEED_MLA",
        "TORCH_SDPA",
        "TREE_ATTN",
        "TRITON_ATTN",
        "TRITON_ATTN_DIFFKV",
        "TRITON_FLASHINFER",
        "TRITON_FLASH_ATTN",
        "TRITON_MLA",
        "TRITON_MSA",
        "TURBOQUANT",
        "ULTRAQUANT",
        "XFORMERS",
        "XPU_MLA_SPARSE",
    }
)
# Other spellings vLLM prints for a backend, lower-cased, punctuation and "using ... backend" / "on V1 engine"
# stripped: get_name() (0.10.x `*_VLLM_V1`; AITER FA calls itself FLASH_ATTN, the CUDA backend's name, which no
# ROCm release can select, so on ROCm it is AITER FA), the prose selection lines of platforms/rocm.py up to 0.17,
# and the class names of the cudagraph downgrade warnings.
_BACKEND_ALIASES = {
    "flash_attn": "ROCM_AITER_FA",
    "flash_attn_vllm_v1": "ROCM_AITER_FA",
    "flash attention": "ROCM_AITER_FA",
    "aiter flash attention": "ROCM_AITER_FA",
    "aiterflashattentionbackend": "ROCM_AITER_FA",
    "aiterflashattentionmetadatabuilder": "ROCM_AITER_FA",
    "aiterflashattentionimpl": "ROCM_AITER_FA",
    "triton attention": "TRITON_ATTN",
    "tritonattentionbackend": "TRITON_ATTN",
    "tritonattentionmetadatabuilder": "TRITON_ATTN",
    "tritonattentionimpl": "TRITON_ATTN",
    "rocm attention": "ROCM_ATTN",
    "rocm/aiter attention": "ROCM_ATTN",
    "rocmattentionbackend": "ROCM_ATTN",
    "rocmattentionmetadatabuilder": "ROCM_ATTN",
    "rocmattentionimpl": "ROCM_ATTN",
    "aiter unified attention": "ROCM_AITER_UNIFIED_ATTN",
    "rocmaiterunifiedattentionbackend": "ROCM_AITER_UNIFIED_ATTN",
    "rocmaiterunifiedattentionmetadatabuilder": "ROCM_AITER_UNIFIED_ATTN",
    "aiter mla": "ROCM_AITER_MLA",
    "aitermlabackend": "ROCM_AITER_MLA",
    "aitermlametadatabuilder": "ROCM_AITER_MLA",
    "aiter triton mla": "ROCM_AITER_TRITON_MLA",
    "aitertritonmlabackend": "ROCM_AITER_TRITON_MLA",
    "triton mla": "TRITON_MLA",
    "tritonmlabackend": "TRITON_MLA",
    "tritonmlametadatabuilder": "TRITON_MLA",
    "sparse mla": "ROCM_AITER_MLA_SPARSE",
    "rocmaitermlasparsebackend": "ROCM_AITER_MLA_SPARSE",
    "rocmaitermlasparsemetadatabuilder": "ROCM_AITER_MLA_SPARSE",
    "flexattention": "FLEX_ATTENTION",
    "rocmflashattention": "ROCM_FLASH",
}
_GFX9 = ("gfx90a", "gfx942", "gfx950")  # platforms/rocm.py on_gfx9() (0.10-0.33)
_MI3XX = ("gfx942", "gfx950")  # on_mi3xx(): what AITER FA accepts in the 0.18 priority list


def canonical_attention_backend(name: str) -> str:
    """The one name (vLLM's enum name, e.g. TRITON_ATTN) for any spelling a vLLM release prints or accepts:
    TRITON_ATTN_VLLM_V1 (0.10.x), FLASH_ATTN / FLASH_ATTN_VLLM_V1 (AITER FA's own name on ROCm), the prose of the
    selection lines ("Using Triton Attention backend on V1 engine."), a downgrade warning's class name
    (AiterFlashAttentionMetadataBuilder), any case. KnownIssuesError for anything else (a ViT/encoder line, a typo)."""
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_TEXT:
        raise KnownIssuesError(f"{str(name)[:60]!r} is not an attention backend name")
    text = name.strip()
    if "vit" in text.lower().split() or "for vit" in text.lower():
        raise KnownIssuesError(f"{text!r} names a vision-encoder backend, not the model's attention backend")
    key = text.lower().rstrip(".").strip()
    key = re.sub(r"^using\s+", "", key)
    key = re.sub(r"\s+on v1 engine$", "", key)
    key = re.sub(r"\s+backend$", "", key).strip()
    if key in _BACKEND_ALIASES:
        return _BACKEND_ALIASES[key]
    enum = key.upper()
    if enum.endswith("_VLLM_V1"):
        enum = enum[: -len("_VLLM_V1")]
        if enum.lower() in _BACKEND_ALIASES:
            return _BACKEND_ALIASES[enum.lower()]
    if enum in BACKEND_NAMES:
        return enum
    raise KnownIssuesError(
        f"{text!r} is not an attention backend vLLM 0.10-0.34 names (e.g. TRITON_ATTN,"
        " ROCM_ATTN, ROCM_AITER_FA, ROCM_AITER_UNIFIED_ATTN, ROCM_AITER_MLA)"
    )


def _truthy(value: str | None) -> bool:
    return value is not None and str(value).strip().lower() in ("true", "1")


def infer_attention_backend(
    release: str | None,
    platform: str = "rocm",
    arch: str | None = None,
    env: dict[str, str] | None = None,
    explicit: str | None = None,
) -> str | None:
    """The attention backend vLLM `release` picks on `platform` for a model with standard (not MLA) attention, as
    platforms/rocm.py get_attn_backend_cls does, or None when that cannot be known here.

    `explicit` is `--attention-backend` (0.14+); `env` the server's environment (None: unknown, so nothing is
    inferred unless `explicit` decides); `arch` the gfx name (None is taken for a gfx9 Instinct GPU, which is
    what this distribution targets). Pre-release and dev builds are judged as their final release. The chart
    (templates/_known_issues.tpl `vllm-rocm.attentionBackend`) implements the same rules; a test compares them.

    - 0.10.x: AITER FA when VLLM_ROCM_USE_AITER and VLLM_ROCM_USE_AITER_MHA on gfx9, else TRITON_ATTN; the
      selected backend (VLLM_ATTENTION_BACKEND) is ignored, VLLM_USE_V1=0 is the removed V0 engine (None).
    - 0.11.0: that AITER FA rule first; then ROCM_ATTN for VLLM_ROCM_USE_AITER + VLLM_USE_AITER_UNIFIED_ATTENTION,
      VLLM_V1_USE_PREFILL_DECODE_ATTENTION or a selected ROCM_ATTN; else TRITON_ATTN.
    - 0.11.1-0.11.2: AITER FA (AITER+MHA on gfx9, or selected), AITER unified (AITER +
      VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION, or selected), ROCM_ATTN (prefill-decode, or selected), TRITON_ATTN.
    - 0.12-0.17: a selected FLEX_ATTENTION / TRITON_ATTN / ROCM_ATTN / ROCM_AITER_UNIFIED_ATTN, or ROCM_AITER_FA on
      gfx9; automatic: AITER unified, AITER FA (gfx9), ROCM_ATTN (prefill-decode), TRITON_ATTN.
    - 0.18: the selected backend; else the first valid of [AITER unified, AITER FA (AITER+MHA, MI300/MI350 only),
      ROCM_ATTN (prefill-decode), TRITON_ATTN].
    - 0.19 and later: the selected backend; else None. ROCM_ATTN heads a priority list of backends that are tried
      against the model (head size, KV cache dtype, sinks, KV connector), which only the running server knows: its
      log says which one it took.
    The selection variables are read until they were removed: VLLM_ATTENTION_BACKEND and
    VLLM_V1_USE_PREFILL_DECODE_ATTENTION up to 0.14 (`--attention-config` from 0.15 is not modelled).
    """
    if platform != "rocm" or release is None:
        return None
    if arch is not None and (not isinstance(arch, str) or len(arch) > _MAX_TEXT):
        raise KnownIssuesError(f"arch={str(arch)[:60]!r} is not a gfx name")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in env.items())
    ):
        raise KnownIssuesError("env must map variable names to string values")
    v = _version(release, "vLLM release").final
    chosen = canonical_attention_backend(explicit) if explicit else None
    if chosen is None and env and env.get("VLLM_ATTENTION_BACKEND") and v < Version.parse("0.15.0"):
        chosen = canonical_attention_backend(env["VLLM_ATTENTION_BACKEND"])
    gfx9 = _on(arch, _GFX9)
    if chosen is not None and v >= Version.parse("0.12.0"):
        if v >= Version.parse("0.18.0"):
            return chosen  # validated against the model; an invalid choice stops the server with a ValueError
        selectable = ("FLEX_ATTENTION", "TRITON_ATTN", "ROCM_ATTN", "ROCM_AITER_UNIFIED_ATTN", "ROCM_AITER_FA")
        # vLLM refuses any other (RuntimeError) and AITER FA off gfx9 (ValueError): that server never starts.
        return chosen if chosen in selectable and (chosen != "ROCM_AITER_FA" or gfx9) else None
    if env is None:
        return None
    aiter = _truthy(env.get("VLLM_ROCM_USE_AITER"))
    mha = _truthy(env.get("VLLM_ROCM_USE_AITER_MHA", "True"))
    unified = _truthy(env.get("VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION"))
    prefill_decode = v < Version.parse("0.15.0") and _truthy(env.get("VLLM_V1_USE_PREFILL_DECODE_ATTENTION"))
    if v < Version.parse("0.11.0"):
        if env.get("VLLM_USE_V1", "1").strip() == "0":
            return None
        return "ROCM_AITER_FA" if aiter and mha and gfx9 else "TRITON_ATTN"
    if v < Version.parse("0.11.1"):
        if aiter and mha and gfx9:
            return "ROCM_AITER_FA"
        old_unified = _truthy(env.get("VLLM_USE_AITER_UNIFIED_ATTENTION"))
        return "ROCM_ATTN" if (aiter and old_unified) or prefill_decode or chosen == "ROCM_ATTN" else "TRITON_ATTN"
    if v < Version.parse("0.12.0"):
        if chosen == "FLEX_ATTENTION":
            return chosen
        if (aiter and mha and gfx9) or chosen == "ROCM_AITER_FA":
            return "ROCM_AITER_FA"
        if (aiter and unified and gfx9) or chosen == "ROCM_AITER_UNIFIED_ATTN":
            return "ROCM_AITER_UNIFIED_ATTN"
        return "ROCM_ATTN" if prefill_decode or chosen == "ROCM_ATTN" else "TRITON_ATTN"
    if v < Version.parse("0.18.0"):
        if aiter and unified:
            return "ROCM_AITER_UNIFIED_ATTN"
        if aiter and mha and gfx9:
            return "ROCM_AITER_FA"
        return "ROCM_ATTN" if prefill_decode else "TRITON_ATTN"
    if v < Version.parse("0.19.0"):
        if aiter and unified:
            return "ROCM_AITER_UNIFIED_ATTN"
        if aiter and mha and _on(arch, _MI3XX):
            return "ROCM_AITER_FA"
        return "TRITON_ATTN"
    return None


def _on(arch: str | None, family: tuple[str, ...]) -> bool:
    a = normalize_arch(arch)
    return a is None or a == "" or a in family


# --- the data --------------------------------------------------------------------------------------------------


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
    scope: list[dict[str, Any]] = field(default_factory=list)  # evidence_scope alternatives

    @property
    def first_fixed(self) -> str | None:
        return (self.raw.get("fix") or {}).get("first_release")

    @property
    def mitigation(self) -> dict[str, Any]:
        return self.raw.get("mitigation") or {}

    @property
    def links(self) -> list[str]:
        """Every thread the row cites: links, evidence links and the fix."""
        out = list(self.raw.get("links") or [])
        out += [e["link"] for e in self.raw.get("evidence") or [] if str(e.get("link", "")).startswith("https://")]
        up = (self.raw.get("fix") or {}).get("upstream")
        return out + ([up] if up else [])

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
    attention_backend: str | None = None  # any spelling canonical_attention_backend reads
    env: dict[str, str] | None = None  # the VLLM_* environment (unset names take their defaults)
    kv_cache_dtype: str | None = None
    quantization: str | None = None  # "none" = unquantized
    speculative_method: str | None = None  # "none" = no speculative decoding
    tensor_parallel_size: int | None = None
    max_num_seqs: int | None = None
    mode: str | None = None  # cudagraph_mode as vLLM runs it (NONE for --enforce-eager)
    patches: frozenset[str] = frozenset()  # applied patch ids, "vllm-0.10.2/0001-....patch"
    architecture: str | None = None  # the model's architecture class, e.g. LlamaForCausalLM


@dataclass
class Match:
    issue: Issue
    status: str  # applies | possible | no
    unknown: list[str]  # conditions the configuration could not decide
    failed: list[str]  # conditions a known value contradicts
    mitigated_by: str | None
    scope: str | None = None  # None (no evidence_scope) | inside | outside | undecided

    @property
    def mitigated(self) -> bool:
        return self.mitigated_by is not None

    @property
    def active(self) -> bool:
        """Applies and nothing in the configuration mitigates it."""
        return self.status == APPLIES and not self.mitigated

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.issue.id,
            "title": self.issue.title,
            "symptom": self.issue.symptom,
            "verified": self.issue.verified,
            "status": self.status,
            "unknown": self.unknown,
            "evidence_scope": self.scope,
            "mitigated_by": self.mitigated_by,
            "active": self.active,
            "advice": self.issue.advice(),
        }


@dataclass
class KnownIssues:
    path: Path
    issues: list[Issue]
    switch_defaults: dict[str, bool | str]
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def get(self, issue_id: str) -> Issue:
        for i in self.issues:
            if i.id == issue_id:
                return i
        raise KeyError(issue_id)

    def evaluate(self, cfg: Config) -> list[Match]:
        _check_config(cfg)
        return [self.match(i, cfg) for i in self.issues]

    def match(self, issue: Issue, cfg: Config) -> Match:
        _check_config(cfg)
        unknown: list[str] = []
        failed: list[str] = []
        for cond in CONDITIONS:
            verdict = self._condition(cond, issue.affects.get(cond), cfg, issue)
            if verdict is None:
                unknown.append(cond)
            elif verdict is False:
                failed.append(cond)
        scope = self._scope(issue, cfg) if issue.scope else None
        if failed:
            status = NO
        elif unknown or scope in (OUTSIDE, UNDECIDED):
            status = POSSIBLE
        else:
            status = APPLIES
        mitigated_by = None
        if cfg.release is not None:
            pid = issue.patch_id(_public(cfg.release))
            if pid and pid in cfg.patches:
                mitigated_by = pid
        return Match(issue, status, unknown, failed, mitigated_by, scope)

    def blocking(self, cfg: Config, allow: tuple[str, ...] | list[str] = ()) -> list[Match]:
        """What a deploy-time guard refuses: verified, applies, unmitigated wrong_tokens / crash rows."""
        return [
            m
            for m in self.evaluate(cfg)
            if m.issue.verified and m.active and m.issue.symptom in BLOCKING_SYMPTOMS and m.issue.id not in allow
        ]

    def fixed_by(self, patch_ids: list[str] | set[str] | frozenset[str]) -> list[str]:
        """The issue ids a set of patches fixes (for image labels and reports)."""
        ids = set(patch_ids)
        return [i.id for i in self.issues if any(i.patch_id(r) in ids for r in i.patches)]

    def _scope(self, issue: Issue, cfg: Config) -> str:
        undecided = False
        for alternative in issue.scope:
            verdicts = [self._condition(c, want, cfg, issue) for c, want in alternative.items()]
            if all(v is True for v in verdicts):
                return INSIDE
            undecided = undecided or False not in verdicts
        return UNDECIDED if undecided else OUTSIDE

    def _condition(self, cond: str, want: Any, cfg: Config, issue: Issue) -> bool | None:
        if want is None:
            return True
        if cond == "vllm":
            if cfg.release is None:
                return None
            return _spec(want, issue.id).contains(_version(cfg.release, "vLLM release"))
        if cond == "rocm":
            return None if cfg.rocm is None else _spec(want, issue.id).contains(_version(cfg.rocm, "ROCm version"))
        if cond == "switches":
            if cfg.env is None:
                return None
            return all(self.switch_matches(name, value, cfg.env) for name, value in want.items())
        if cond in RANGE_CONDITIONS:
            n = getattr(cfg, cond)
            return None if n is None else Range.of(want).contains(n)
        value = _value(cond, cfg)
        return None if value is None else value in want

    def switch(self, name: str, env: dict[str, str]) -> bool | str:
        """The value vLLM reads for switch `name` (its data default when `env` does not set it)."""
        default = self.switch_defaults[name]
        if name not in env:
            return default if isinstance(default, bool) else default.lower()
        raw = str(env[name]).strip().lower()
        return raw in ("true", "1") if isinstance(default, bool) else raw

    def switch_matches(self, name: str, want: bool | str, env: dict[str, str]) -> bool:
        got = self.switch(name, env)
        return got == (want if isinstance(want, bool) else str(want).lower())


def _value(cond: str, cfg: Config) -> str | None:
    if cond == "archs":
        return normalize_arch(cfg.arch) or None
    if cond == "attention_backends":
        if cfg.attention_backend is None:
            return None
        try:
            return canonical_attention_backend(cfg.attention_backend)
        except KnownIssuesError:  # a name this module does not know: unknown, never a mismatch
            return None
    raw = getattr(cfg, FIELDS[cond])
    if raw is None:
        return None
    if cond == "modes":
        return raw.strip().upper()
    if cond == "architectures":
        return raw.strip()
    return raw.strip().lower()


def _check_config(cfg: Config) -> None:
    """Values of the wrong type or absurd length are errors: a consumer must not be judged on a guess."""
    for name in (
        "release",
        "rocm",
        "arch",
        "attention_backend",
        "kv_cache_dtype",
        "quantization",
        "speculative_method",
        "mode",
        "architecture",
    ):
        v = getattr(cfg, name)
        if v is not None and (not isinstance(v, str) or len(v) > _MAX_TEXT):
            raise KnownIssuesError(f"{name}={str(v)[:60]!r} is not a string of at most {_MAX_TEXT} characters")
    for name in RANGE_CONDITIONS:
        v = getattr(cfg, name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 < v < 10**9):
            raise KnownIssuesError(f"{name}={str(v)[:60]!r} is not a positive integer")
    if cfg.env is not None:
        if not isinstance(cfg.env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in cfg.env.items()
        ):
            raise KnownIssuesError("env must map variable names to string values")


def normalize_arch(arch: str | None) -> str | None:
    return None if arch is None else arch.split(":", 1)[0].strip().lower()


def _public(release: str) -> str:
    return release.strip().split("+", 1)[0]


def _version(text: str, what: str) -> Version:
    try:
        return Version.parse(text)
    except InvalidVersion as exc:
        raise KnownIssuesError(f"{what} {str(text)[:60]!r} is not a version this tool can judge: {exc}") from None


@functools.lru_cache(maxsize=256)
def _spec(text: str, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise KnownIssuesError(f"{where}: {exc}") from None


def default_mode(release: str) -> str:
    """vLLM's cudagraph_mode when none is given (shared notes: PIECEWISE up to 0.10.x, then FULL_AND_PIECEWISE);
    a pre-release or dev build takes its final release's default."""
    v = _version(release, "vLLM release").final
    return "PIECEWISE" if v < Version.parse("0.11.0") else "FULL_AND_PIECEWISE"


def load(path: Path | None = None, series_dir: Path | None = None) -> KnownIssues:
    path = Path(path) if path is not None else default_data_path(series_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnownIssuesError(f"known-issues data {path} not found (set {ENV_DATA})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnownIssuesError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise KnownIssuesError(f"{path}: invalid JSON: {exc}") from None
    return parse(data, path)


def parse(data: Any, path: Path) -> KnownIssues:  # noqa: C901 - one structural check after another
    """Structural checks the stdlib can make (the full JSON schema is checked in tests): a file that parses
    here gives every consumer the same answers."""

    def bad(msg: str) -> KnownIssuesError:
        return KnownIssuesError(f"{path}: {msg}")

    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise bad(f"not a known-issues file of schema_version {SCHEMA_VERSION}")
    defaults = data.get("switch_defaults")
    if not isinstance(defaults, dict) or not all(
        _SWITCH_RE.match(str(k)) and isinstance(v, (bool, str)) for k, v in defaults.items()
    ):
        raise bad("switch_defaults must map VLLM_* names to booleans or strings")
    issues: list[Issue] = []
    seen: set[str] = set()
    for raw in data.get("issues", []):
        iid = raw.get("id", "") if isinstance(raw, dict) else ""
        if not isinstance(iid, str) or not _ID_RE.match(iid) or iid in seen:
            raise bad(f"issue id {iid!r} is missing, malformed or repeated")
        seen.add(iid)
        a = raw.get("affects")
        if not isinstance(a, dict) or not a.get("vllm") or not a.get("modes"):
            raise bad(f"{iid}: affects.vllm and affects.modes are required")
        _check_conditions(a, iid, defaults, bad)
        scope = raw.get("evidence_scope") or []
        if not isinstance(scope, list) or not all(isinstance(s, dict) and s for s in scope):
            raise bad(f"{iid}: evidence_scope must be a list of condition maps")
        for alternative in scope:
            _check_conditions(alternative, iid + " evidence_scope", defaults, bad)
        if raw.get("symptom") not in SYMPTOMS:
            raise bad(f"{iid}: symptom must be one of {SYMPTOMS}")
        if not isinstance(raw.get("verified"), bool):
            raise bad(f"{iid}: verified must be true or false")
        if raw["verified"] and not raw.get("checks"):
            raise bad(f"{iid}: a verified row must say what was checked")
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
        issues.append(
            Issue(iid, raw.get("title", ""), raw["symptom"], raw["verified"], a, raw, vllm, rocm, patches, scope)
        )
    rejected = data.get("rejected", [])
    if not isinstance(rejected, list) or not all(
        isinstance(r, dict) and r.get("links") and r.get("reason") for r in rejected
    ):
        raise bad("rejected must be a list of {links, title, reason, checks}")
    return KnownIssues(path, issues, dict(defaults), rejected)


def _check_conditions(a: dict[str, Any], where: str, defaults: dict[str, Any], bad: Any) -> None:
    unknown_keys = set(a) - set(CONDITIONS)
    if unknown_keys:
        raise bad(f"{where}: unknown conditions {sorted(unknown_keys)}")
    if any(m not in MODES for m in a.get("modes") or []):
        raise bad(f"{where}: modes must be among {MODES}")
    for name, value in (a.get("switches") or {}).items():
        if name not in defaults:
            raise bad(f"{where}: switch {name} has no entry in switch_defaults")
        if type(value) is not type(defaults[name]):
            raise bad(f"{where}: switch {name} must be a {type(defaults[name]).__name__} like its default")
    for name in a.get("attention_backends") or []:
        try:
            canonical = canonical_attention_backend(name)
        except KnownIssuesError as exc:
            raise bad(f"{where}: {exc}") from None
        if canonical != name:
            raise bad(f"{where}: write the attention backend {name!r} as {canonical!r}")
    for key in ("vllm", "rocm"):
        if a.get(key) is not None:
            try:
                SpecifierSet(a[key])
            except InvalidSpecifier as exc:
                raise bad(f"{where}: {exc}") from None


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
            "id": issue.id,
            "title": issue.title,
            "symptom": issue.symptom,
            "verified": issue.verified,
            "conditions": describe_conditions(issue),
        }
        if issue.vllm.contains(v):
            pid = issue.patch_id(_public(release))
            if pid is not None:
                row.update(state="fixed-by-series", patch=pid, patch_state=patch_states.get(pid, "missing"))
            else:
                row.update(state="unmitigated", advice=issue.advice())
        elif issue.first_fixed and v.public >= Version.parse(issue.first_fixed):
            row.update(state="fixed-upstream", first_release=issue.first_fixed)
        else:
            row.update(state="not-affected")
        out.append(row)
    return out


_LABELS = {
    "kv_cache_dtypes": "kv-cache",
    "quantizations": "quantization",
    "speculative_methods": "spec decode",
    "archs": "arch",
    "architectures": "model",
}


def _describe(a: dict[str, Any], with_modes: bool = True) -> list[str]:
    parts = []
    if a.get("attention_backends"):
        parts.append("/".join(a["attention_backends"]))
    for name, value in (a.get("switches") or {}).items():
        parts.append(f"{name}={int(value) if isinstance(value, bool) else value}")
    for key, label in _LABELS.items():
        if a.get(key):
            parts.append(f"{label} {'/'.join(a[key])}")
    for key, label in (("tensor_parallel_size", "TP"), ("max_num_seqs", "max-num-seqs")):
        if a.get(key):
            parts.append(f"{label} {Range.of(a[key])}")
    if a.get("rocm"):
        parts.append(f"ROCm {a['rocm']}")
    if a.get("vllm") and not with_modes:
        parts.append(f"vLLM {a['vllm']}")
    if with_modes and a.get("modes"):
        modes = a["modes"]
        parts.append("any cudagraph mode" if set(modes) == set(MODES) else "modes " + "/".join(modes))
    return parts


def describe_conditions(issue: Issue) -> str:
    """The row's trigger in words, e.g. `ROCM_AITER_FA, kv-cache fp8, gfx950, modes FULL`, and the reports' scope."""
    text = ", ".join(_describe(issue.affects))
    if issue.scope:
        text += "; reported for " + " or ".join("(" + ", ".join(_describe(s, False)) + ")" for s in issue.scope)
    return text


README_START = "<!-- known-issues-table:start (generated from known-issues.json by `make generate`) -->"
README_END = "<!-- known-issues-table:end -->"


def markdown_table(ki: KnownIssues) -> str:
    """The README tables: one line per row, in file order, then the candidates that were researched and rejected."""
    lines = [
        "| id | symptom | vLLM | when | fixed upstream | in this distribution | verified |",
        "|---|---|---|---|---|---|---|",
    ]
    for i in ki.issues:
        fix = i.raw.get("fix") or {}
        upstream = (
            f"{fix['first_release']} ([{_short_link(fix['upstream'])}]({fix['upstream']}))"
            if (fix.get("first_release") and fix.get("upstream"))
            else (fix.get("state") or "no")
        )
        if i.patches:
            ours = "patch for " + ", ".join(f"`vllm-{r}/{n.split('-', 1)[0]}`" for r, n in sorted(i.patches.items()))
        elif i.mitigation.get("safe_modes"):
            ours = "safe mode " + "/".join(i.mitigation["safe_modes"])
        else:
            ours = i.mitigation.get("advice", "-")
        if i.verified and i.symptom in BLOCKING_SYMPTOMS:
            ours += "; refused unless mitigated" + (" (inside the reported scope)" if i.scope else "")
        cells = [
            f"[`{i.id}`]({i.raw['links'][0]})",
            i.symptom,
            f"`{i.affects['vllm']}`",
            describe_conditions(i),
            upstream,
            ours,
            "yes" if i.verified else "no",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if ki.rejected:
        lines += [
            "",
            "Researched and rejected (not rows; kept so nobody researches them again):",
            "",
            "| thread | what was reported | why it is not a row |",
            "|---|---|---|",
        ]
        for r in ki.rejected:
            refs = ", ".join(f"[{_short_link(u)}]({u})" for u in r["links"])
            lines.append(
                "| " + " | ".join(c.replace("|", "\\|") for c in (refs, r.get("title", ""), r["reason"])) + " |"
            )
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


# ROCm versions tried, in order, when a row's trigger needs one inside its specifiers (the vLLM releases tried are the
# release registry's, `example_releases`).
_ROCM_CANDIDATES = ("7.0.0", "7.1.1", "7.2.0", "7.2.3", "7.2.4", "6.4.1")


def example_releases() -> tuple[str, ...]:
    """The vLLM releases example configurations pick from, in order: `checked.examples` of the repository's release
    registry (releases.json; real releases, the first inside each row's range is taken). Example configurations are
    for the repository's tests: an installed package without a checkout has none."""
    path = Path(__file__).resolve().parents[3] / "releases.json"
    try:
        return tuple(json.loads(path.read_text(encoding="utf-8"))["checked"]["examples"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KnownIssuesError(f"{path}: no release registry with checked.examples ({exc})") from None


def example_config(issue: Issue, patches: frozenset[str] = frozenset(), releases: tuple[str, ...] = ()) -> Config:
    """A fully known configuration that triggers `issue` (its first value of every condition, inside its first
    evidence_scope alternative; its release the first of `releases`, default `example_releases()`, inside the row's
    range): what a test renders to check that every consumer (chart guard, sidecar) agrees with this evaluator row by
    row."""
    a = dict(issue.affects)
    inside = issue.scope[0] if issue.scope else {}
    for cond, want in inside.items():
        if cond in LIST_CONDITIONS:
            a[cond] = [w for w in (a.get(cond) or want) if w in want] or want
        elif cond == "switches":
            a[cond] = {**(a.get(cond) or {}), **want}
        elif cond in RANGE_CONDITIONS:
            a[cond] = want
    release_specs = [issue.vllm] + ([_spec(inside["vllm"], issue.id)] if inside.get("vllm") else [])
    release = next((v for v in releases or example_releases() if all(s.contains(v) for s in release_specs)), None)
    rocm_specs = [s for s in (issue.rocm,) if s is not None]
    if inside.get("rocm"):
        rocm_specs.append(_spec(inside["rocm"], issue.id))
    rocm = next((v for v in _ROCM_CANDIDATES if all(s.contains(v) for s in rocm_specs)), None)
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

    env = {k: ("1" if v else "0") if isinstance(v, bool) else v for k, v in (a.get("switches") or {}).items()}
    return Config(
        release=release,
        rocm=rocm,
        arch=first("archs", "gfx942"),
        attention_backend=first("attention_backends", "TRITON_ATTN"),
        env=env,
        kv_cache_dtype=first("kv_cache_dtypes", "auto"),
        quantization=first("quantizations", "none"),
        speculative_method=first("speculative_methods", "none"),
        tensor_parallel_size=number("tensor_parallel_size", 1),
        max_num_seqs=number("max_num_seqs", 100 if a.get("max_num_seqs") else 256),
        mode=a["modes"][0],
        patches=patches,
        architecture=first("architectures", "LlamaForCausalLM"),
    )
