"""The chart's known-issues guard agrees with the Python evaluator (vllm_rocm_known_issues.evaluator), row by row.

Every row's trigger (`known_issues.example_config`) is rendered through the real helm: the chart must refuse exactly
the rows `KnownIssues.blocking` names, and nothing when they are in allowKnownIssues, when the image's patches
mitigate them, or when one condition of the row is moved off it. The version bounds the templates implement (on every
bound of the data in rc, dev, post and local spellings), the automatic attention backend (a table of releases x
environments x GPUs x explicit choices) and a few hundred random configurations are checked in one render each,
through a copy of the chart with a probe template that calls the same helpers (templates/_known_issues.tpl) on many
inputs. The Python side derives its `Config` from the values independently (`config_from_values`, with the one
backend inference, known_issues.infer_attention_backend), so a wrong mapping in the chart fails here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_known_issues import evaluator as ki
from vllm_rocm_known_issues.pep440 import InvalidVersion, SpecifierSet, Version
from vllm_rocm_patches import series

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helm_chart import (  # noqa: E402
    CAPS,
    CHART,
    MODES,
    ROOT,
    container,
    helm,
    notes,
    pod_spec,
    render,
    render_error,
    render_probe,
    set_args,
    with_reference,
)
from helm_chart import probe_chart as make_probe_chart  # noqa: E402

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SOURCE = ROOT / "known-issues" / "known-issues.json"
COPY = CHART / "files" / "known-issues.json"
DATA = ki.load(SOURCE)
SSET = series.load(ROOT / "patches")
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
REFUSAL = "the chart refuses this configuration: it hits known issues"
ROW = re.compile(r"^  - ([a-z0-9][a-z0-9-]*[a-z0-9]) \[(\w+)\]: ", re.M)
# Rules of the chart's guard outside the data (templates/_helpers.tpl vllm-rocm.validate): the chart may refuse more
# than the data says, never less. Each is a message fragment of such a refusal.
CHART_REFUSES_MORE = (
    "with speculative decoding on the AITER FlashAttention backend",
    # settings the typed values own (e.g. VLLM_USE_BREAKABLE_CUDAGRAPH in extraEnv)
    "the chart refuses these values (every compilation and CUDA-graph setting goes through",
)
GFX9 = ("gfx90a", "gfx942", "gfx950")
BACKENDS = ("ROCM_AITER_FA", "TRITON_ATTN", "ROCM_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_UNIFIED_ATTN")


# --- mapping between chart values and the evaluator's Config -------------------------------------------------------


def _default(key: str) -> Any:
    node: Any = DEFAULTS
    for part in key.split("."):
        node = node[part]
    return node


def _minor(release: str) -> tuple[int, int]:
    parts = release.split(".")
    return int(parts[0]), int(re.match(r"\d+", parts[1]).group(0))  # type: ignore[union-attr]


def series_patches(release: str) -> frozenset[str]:
    """The patch ids this project's image for `release` bakes in: its whole series (patches/vllm-<release>/)."""
    rs = SSET.releases.get(release)
    return frozenset(f"{rs.id}/{e.patch_name}" for e in rs.entries if e.patch_name) if rs else frozenset()


def config_from_values(values: dict[str, Any]) -> ki.Config:
    """What the chart deploys, as the evaluator's Config: written from the values' documentation, not from the
    templates. `values` holds --set-json keys; the rest are the chart's defaults."""

    def get(key: str) -> Any:
        return values[key] if key in values else _default(key)

    release = get("vllm.release")
    arch = get("rocm.gpuArch") or None
    aiter, mha = bool(get("aiter.enabled")), bool(get("aiter.mha"))
    env = {"VLLM_ROCM_USE_AITER": "1" if aiter else "0", "VLLM_ROCM_USE_AITER_MHA": "1" if mha else "0"}
    for e in get("extraEnv"):
        assert "valueFrom" not in e, "config_from_values cannot express a switch the chart does not know"
        if e["name"].startswith("VLLM_"):
            env[e["name"]] = str(e.get("value", ""))
    backend = ki.infer_attention_backend(
        release, arch=ki.normalize_arch(arch), env=env, explicit=get("attentionBackend") or None
    )
    spec = get("speculativeConfig") or {}
    public = release.split("+", 1)[0]
    fixes = get("vllm.fixesIssues")
    if fixes:
        patches = frozenset(p for p in (DATA.get(i).patch_id(public) for i in fixes) if p)
    else:
        patches = series_patches(public) if get("vllm.patched") else frozenset()
    return ki.Config(
        release=release,
        rocm=get("rocm.version") or None,
        arch=arch,
        attention_backend=backend,
        env=env,
        kv_cache_dtype=get("kvCacheDtype") or "auto",
        quantization=get("quantization") or None,
        speculative_method=(str(spec["method"]) if "method" in spec else None) if spec else "none",
        tensor_parallel_size=int(get("tensorParallelSize")),
        max_num_seqs=int(get("maxNumSeqs")) or None,
        mode="NONE" if get("enforceEager") else get("compilation.cudagraphMode"),
        patches=patches,
        architecture=None,  # no chart value: the sidecar reads it from vLLM's log
    )


def values_for(cfg: ki.Config, **extra: Any) -> dict[str, Any]:
    """Chart values that deploy `cfg` (an example_config, maybe perturbed)."""
    env = dict(cfg.env or {})
    aiter = DATA.switch("VLLM_ROCM_USE_AITER", env) is True
    mha = DATA.switch("VLLM_ROCM_USE_AITER_MHA", env) is True
    values: dict[str, Any] = {
        "vllm.release": cfg.release,
        "vllm.patched": False,
        "rocm.version": cfg.rocm or "",
        "rocm.gpuArch": cfg.arch or "",
        "kvCacheDtype": cfg.kv_cache_dtype or "",
        "quantization": cfg.quantization or "",
        "tensorParallelSize": cfg.tensor_parallel_size,
        "gpusPerNode": max(8, cfg.tensor_parallel_size or 1),
        "maxNumSeqs": cfg.max_num_seqs or 0,
        "compilation.cudagraphMode": cfg.mode,
        "speculativeConfig": {}
        if cfg.speculative_method in (None, "none")
        else {"method": cfg.speculative_method, "num_speculative_tokens": 2},
    }
    assert cfg.release is not None
    if _minor(cfg.release) >= (0, 14):
        values["attentionBackend"] = cfg.attention_backend or ""
    else:  # before 0.14 only the automatic choice picks a backend: find the switches that make it pick this one
        for a, m in ((aiter, mha), (True, True), (True, False), (False, mha)):
            if (
                ki.infer_attention_backend(
                    cfg.release,
                    arch=cfg.arch,
                    env={**env, "VLLM_ROCM_USE_AITER": str(int(a)), "VLLM_ROCM_USE_AITER_MHA": str(int(m))},
                )
                == cfg.attention_backend
            ):
                aiter, mha = a, m
                break
        else:
            raise ValueError(f"backend {cfg.attention_backend} cannot be chosen on vLLM {cfg.release} by the chart")
    values["aiter.enabled"], values["aiter.mha"] = aiter, mha
    values["extraEnv"] = [
        {"name": k, "value": v} for k, v in env.items() if k not in ("VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_MHA")
    ]
    values.update(extra)
    return values


@dataclasses.dataclass
class Verdict:
    refused: set[str]  # known-issue ids the render refused
    other: str = ""  # another refusal of the guard (CHART_REFUSES_MORE)


def verdict(values: dict[str, Any]) -> Verdict:
    proc = helm("template", "rel", str(CHART), "-n", "llm", *CAPS, *set_args(with_reference(values)), check=False)
    if proc.returncode == 0:
        return Verdict(set())
    if REFUSAL in proc.stderr:
        return Verdict({m for m, _ in ROW.findall(proc.stderr)})
    return Verdict(set(), proc.stderr)


def check_agrees(values: dict[str, Any], allow: tuple[str, ...] = ()) -> set[str]:
    """Render `values`; the refused ids must be the evaluator's blocking ids. Returns them."""
    cfg = config_from_values(values)
    want = {m.issue.id for m in DATA.blocking(cfg, allow)}
    got = verdict(values)
    if got.other:
        assert not want, f"{values}: the evaluator blocks {want}, the chart failed otherwise:\n{got.other}"
        assert any(m in got.other for m in CHART_REFUSES_MORE), f"{values}: unexpected failure:\n{got.other}"
    assert got.refused == want, f"{values}\n{cfg}\nchart refused {got.refused}, the evaluator blocks {want}"
    return want


# --- the data the chart reads --------------------------------------------------------------------------------------


def test_chart_reads_the_single_source() -> None:
    assert COPY.read_bytes() == SOURCE.read_bytes(), (
        "charts/vllm-rocm/files/known-issues.json differs from known-issues/known-issues.json: make generate"
    )


def test_every_specifier_in_the_data_is_one_the_chart_evaluates() -> None:
    for issue in DATA.issues:
        for key in ("vllm", "rocm"):
            for part in filter(None, (p.strip() for p in (issue.affects.get(key) or "").split(","))):
                assert re.match(r"^(>=|<)\s*(?:[0-9]+!)?[^\s,;*+=<>!~]+$", part), f"{issue.id} {key}: {part}"


def test_every_mitigation_patch_is_in_its_release_series() -> None:
    """vllm.patched=true means 'the release's whole series'; the chart derives what that fixes from the data."""
    for issue in DATA.issues:
        for release, name in issue.patches.items():
            assert f"vllm-{release}/{name}" in series_patches(release), (issue.id, release, name)


# --- the probe: many inputs through the chart's own helpers in one render ------------------------------------------

PROBE = r"""
{{- $out := dict "pep440" (list) "configs" (list) "backends" (list) -}}
{{- range $b := .Values.probe.backends -}}
{{- $v := include "vllm-rocm.pep440Parse" $b.release | fromJson -}}
{{- $args := dict "version" $v "arch" $b.arch "env" $b.env "explicit" $b.explicit -}}
{{- $r := include "vllm-rocm.attentionBackend" $args | fromJson -}}
{{- $_ := set $out "backends" (append $out.backends $r.name) -}}
{{- end -}}
{{- with .Values.probe.pep440 -}}
{{- $bounds := list -}}
{{- range $s := .specs -}}
{{- $bounds = append $bounds (include "vllm-rocm.pep440Bounds" (dict "spec" $s "what" "probe") | fromJsonArray) -}}
{{- end -}}
{{- range $text := .versions -}}
{{- $v := include "vllm-rocm.pep440Parse" $text | fromJson -}}
{{- $row := list -}}
{{- range $b := $bounds -}}
{{- $row = append $row (ternary (include "vllm-rocm.pep440Admits" (dict "version" $v "bounds" $b)) "invalid" $v.ok) -}}
{{- end -}}
{{- $_ := set $out "pep440" (append $out.pep440 $row) -}}
{{- end -}}
{{- end -}}
{{- range $c := .Values.probe.configs -}}
{{- $ctx := dict "Values" $c "Files" $.Files "Chart" $.Chart "Release" $.Release
  "Capabilities" $.Capabilities "Template" $.Template -}}
{{- $e := include "vllm-rocm.effective" $ctx | fromJson -}}
{{- $ki := include "vllm-rocm.knownIssues" (dict "root" $ctx "e" $e) | fromJson -}}
{{- $_ := set $out "configs" (append $out.configs $ki) -}}
{{- end -}}
"""


@pytest.fixture(scope="module")
def probe_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_probe_chart(tmp_path_factory.mktemp("probe"), PROBE)


def probe(chart: Path, tmp: Path, check: bool = True, **inputs: Any) -> Any:
    return render_probe(chart, tmp, inputs, check=check)


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """The chart's full values with the --set-json keys of `flat` applied (what helm would pass the templates)."""
    values = copy.deepcopy(DEFAULTS)
    for key, value in flat.items():
        node = values
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return values


EDGE_VERSIONS = [
    "0.10.1",
    "0.10.1.1",
    "0.10.2",
    "0.10.2+rocm700",
    "0.10.2.post1",
    "0.10.2-1",
    "0.10.2.r2",
    "0.10.2rc1",
    "0.10.2c1",
    "0.10.2.pre1",
    "0.10.2-preview.2",
    "0.10.2a1",
    "0.10.2alpha1",
    "0.10.2.b3",
    "0.10.2beta",
    "0.10.2.dev3",
    "0.10.2_dev",
    "0.10.2rc1.dev2",
    "0.10.2.post1.dev1",
    "0.10.3.dev0",
    "0.11.0.dev0",
    "0.11.0.dev5",
    "0.11.0rc1",
    "0.11.0rc1+local.7",
    "0.11",
    "0.11.0",
    "0.11.0.0",
    "0.11.0.post1",
    "0.15.0.dev0",
    "0.15.0.dev1",
    "0.15.0rc0",
    "0.15.0rc1",
    "0.15.0",
    "0.14.1",
    "0.28.9",
    "0.29.0",
    "0.29.0rc2",
    "0.30.0",
    "v0.33.0",
    "V0.33.0",
    " 0.19.0 ",
    "1!0.1",
    "1!0.10.2",
    "0",
    "7.2",
    "7.2.0",
    "7.2.3",
    "7.2.4",
    "7.2.4.dev1",
    "7.1.1",
    "6.4.1",
    "7.0.0",
    "2025.10.06",
    "0.10.2.dev383+g1234abc.rocm700",
    "0.26.1rc1.dev668+g3ee2df303",
    "0.11.0+g" + "1" * 12,
    "999999999.0",
    # not PEP 440, or beyond the bounds both sides enforce: both must say so
    "latest",
    "",
    "0.10.2-foo",
    "0..1",
    "1.0+",
    "0.10.x",
    "rocm7.0",
    "0.10.2+",
    "1!",
    "0.1.2.3.4.5.6.7.8.9.10",
    "0." + "9" * 5000,
    "0.1234567890",
    "0.10.2.dev" + "1" * 10,
    "1" * 101,
    "0.10.2+" + "a" * 100,
]
EDGE_SPECS = [
    ">=0.10.2",
    "<0.11.0",
    "<0.11.0rc1",
    "<0.11.0.dev0",
    ">=0",
    "<0.15.0rc0",
    ">=0.15.0.dev0,<0.15.0rc0",
    ">=7.2.0,<7.2.4",
    "",
    ">=0.10.1,<0.10.2",
    "<7.2.4",
    ">=7.2",
    "<7.2.4.dev1",
    ">=0.10.2.post1",
    "<0.10.2.post1",
]
# rc, dev, post and local spellings of a version (what ROCm images carry).
SPELLINGS = (
    "{}",
    "{}rc1",
    "{}rc3",
    "{}a1",
    "{}.dev0",
    "{}.dev383+g1234abc.rocm700",
    "{}.post1",
    "{}.post1.dev2",
    "{}+rocm700",
    "{}rc1.dev5+g0a1b",
    "1!{}",  # a packager's epoch: the same release's code (issue 30)
    "2!{}rc1+rocm700",
)


def spellings(version: str) -> list[str]:
    base = version.split("+", 1)[0]
    if Version.parse(base).is_prerelease or Version.parse(base).post is not None:
        return [version]
    return [s.format(base) for s in SPELLINGS]


def _python_verdict(version: str, spec: str) -> str:
    try:
        return "true" if SpecifierSet(spec).contains(Version.parse(version)) else "false"
    except InvalidVersion:
        return "invalid"


def test_version_bounds_agree_with_the_python_rules(probe_chart: Path, tmp_path: Path) -> None:
    """Every bound of the data (and the releases and ROCm versions the tests use) in rc, dev, post and local spellings,
    against every bound set of the data: the chart and pep440.py give the same verdict."""
    data_specs = {i.affects[k] for i in DATA.issues for k in ("vllm", "rocm") if i.affects.get(k)}
    data_specs |= {s[k] for i in DATA.issues for s in i.scope for k in ("vllm", "rocm") if s.get(k)}
    bounds = [b.version.text for s in data_specs for b in SpecifierSet(s).bounds]
    versions = list(
        dict.fromkeys(
            EDGE_VERSIONS
            + [v for b in bounds for v in spellings(b)]
            + list(ki.example_releases())
            + list(ki._ROCM_CANDIDATES)
        )
    )
    specs = list(dict.fromkeys(sorted(data_specs) + EDGE_SPECS))
    got = probe(probe_chart, tmp_path, pep440={"versions": versions, "specs": specs})["pep440"]
    pairs = [(v, s) for v in versions for s in specs]
    wrong = [
        f"{v!r} in {s!r}: chart {chart}, python {_python_verdict(v, s)}"
        for (v, s), chart in zip(pairs, [c for row in got for c in row], strict=True)
        if chart != _python_verdict(v, s)
    ]
    assert not wrong, "\n".join(wrong[:40])
    assert len(pairs) > 5000
    # the spellings reach both sides of every bound (or the comparison above proves little)
    verdicts = {_python_verdict(v, s) for v, s in pairs}
    assert verdicts == {"true", "false", "invalid"}


@pytest.mark.parametrize(
    "spec",
    ["~=0.10", "==0.10.*", "===0.10.2", ">=0.10.2+rocm700", "0.10.2", "==0.10.2", "!=0.10.2", "<=0.11.0", ">0.10.2"],
)
def test_a_specifier_the_templates_cannot_evaluate_fails_the_render(
    probe_chart: Path, tmp_path: Path, spec: str
) -> None:
    proc = probe(probe_chart, tmp_path, check=False, pep440={"versions": ["0.10.2"], "specs": [spec]})
    assert proc.returncode != 0 and "cannot evaluate the bound" in proc.stderr, proc.stderr


BACKEND_RELEASES = [
    "0.10.1.1",
    "0.10.2",
    "0.10.2rc1",
    "0.11.0",
    "0.11.0rc2",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1.dev3",
    "0.15.0",
    "0.17.1",
    "0.18.0",
    "0.18.1rc1",
    "0.19.0",
    "0.20.0",
    "0.34.0",
]
BACKEND_ENVS = [
    {},
    {"VLLM_ROCM_USE_AITER": "1"},
    {"VLLM_ROCM_USE_AITER": "true", "VLLM_ROCM_USE_AITER_MHA": "0"},
    {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "1"},
    {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MHA": "false", "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "1"},
    {"VLLM_V1_USE_PREFILL_DECODE_ATTENTION": "1"},
    {"VLLM_ROCM_USE_AITER": "1", "VLLM_USE_AITER_UNIFIED_ATTENTION": "1", "VLLM_ROCM_USE_AITER_MHA": "0"},
    {"VLLM_ATTENTION_BACKEND": "ROCM_ATTN"},
    {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN_VLLM_V1", "VLLM_ROCM_USE_AITER": "1"},
    {"VLLM_USE_V1": "0", "VLLM_ROCM_USE_AITER": "1"},
    {"VLLM_ROCM_USE_AITER": "yes"},
]
BACKEND_EXPLICIT = [
    "",
    "ROCM_AITER_FA",
    "TRITON_ATTN",
    "ROCM_ATTN",
    "ROCM_AITER_UNIFIED_ATTN",
    "FLASHINFER",
    "TRITON_ATTN_VLLM_V1",
    "FLASH_ATTN",
]


def test_the_automatic_backend_agrees_with_the_python_inference(probe_chart: Path, tmp_path: Path) -> None:
    """One inference: the chart's vllm-rocm.attentionBackend and known_issues.infer_attention_backend, on a table of
    releases x environments x GPUs x explicit choices."""
    archs = ("", "gfx90a", "gfx942", "gfx1100")  # gfx950 is gfx942 for every rule
    cases = [
        {"release": r, "arch": a, "env": e, "explicit": ""}
        for r in BACKEND_RELEASES
        for a in archs
        for e in BACKEND_ENVS
    ]
    cases += [
        {"release": r, "arch": a, "env": e, "explicit": x}
        for r in BACKEND_RELEASES
        for a in archs
        for e in BACKEND_ENVS[:2]
        for x in BACKEND_EXPLICIT[1:]
    ]
    got = probe(probe_chart, tmp_path, backends=cases)["backends"]
    wrong = []
    names = set()
    for case, chart in zip(cases, got, strict=True):
        want = ki.infer_attention_backend(
            case["release"], arch=case["arch"] or None, env=case["env"], explicit=case["explicit"] or None
        )
        names.add(want)
        if chart != (want or ""):
            wrong.append(f"{case}: chart {chart!r}, python {want!r}")
    assert not wrong, "\n".join(wrong[:30])
    assert {None, "TRITON_ATTN", "ROCM_AITER_FA", "ROCM_ATTN", "ROCM_AITER_UNIFIED_ATTN", "FLEX_ATTENTION"} - {
        "FLEX_ATTENTION"
    } <= names


def test_the_chart_knows_every_backend_name_the_evaluator_knows(probe_chart: Path, tmp_path: Path) -> None:
    text = (CHART / "templates" / "_known_issues.tpl").read_text()
    block = text.split('define "vllm-rocm.attentionBackendNames"', 1)[1].split("{{- end -}}", 1)[0]
    assert set(block.split("-}}", 1)[1].split()) == set(ki.BACKEND_NAMES)
    proc = probe(
        probe_chart,
        tmp_path,
        check=False,
        backends=[{"release": "0.14.0", "arch": "", "env": {}, "explicit": "NOPE_ATTN"}],
    )
    assert proc.returncode != 0 and "is not an attention backend" in proc.stderr


def test_a_malformed_data_copy_fails_the_render(tmp_path: Path) -> None:
    chart = tmp_path / "vllm-rocm"
    shutil.copytree(CHART, chart)
    for text, message in (
        ("{not json", "not a known-issues file"),
        (json.dumps({"schema_version": 1, "issues": []}), "schema_version 2"),
    ):
        (chart / "files" / "known-issues.json").write_text(text)
        proc = helm("template", "rel", str(chart), *set_args(with_reference({})), check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    (chart / "files" / "known-issues.json").unlink()
    proc = helm("template", "rel", str(chart), *set_args(with_reference({})), check=False)
    assert proc.returncode != 0 and "files/known-issues.json is missing" in proc.stderr


# --- row by row, through helm template -----------------------------------------------------------------------------


def _other_value(current: Any, candidates: Any, condition: Any) -> Any:
    return next((c for c in candidates if c != current and not condition(c)), None)


def perturbations(issue: ki.Issue, cfg: ki.Config) -> Iterator[tuple[str, ki.Config]]:
    """The row's trigger with one condition moved off the row (where the chart can express the other value)."""
    a = issue.affects
    rep = dataclasses.replace
    release = _other_value(
        cfg.release, [r for r in ki.example_releases() if _minor(r) >= (0, 10) and r != "0.9.2"], issue.vllm.contains
    )
    if release:
        backend = cfg.attention_backend
        if _minor(release) < (0, 14) and backend not in ("ROCM_AITER_FA", "TRITON_ATTN"):
            backend = "TRITON_ATTN"
        yield "vllm", rep(cfg, release=release, attention_backend=backend)
    if issue.rocm is not None:
        yield "rocm", rep(cfg, rocm=_other_value(cfg.rocm, ki._ROCM_CANDIDATES, issue.rocm.contains))
    if a.get("archs"):
        arch = _other_value(cfg.arch, GFX9, lambda x: x in a["archs"])
        assert cfg.release is not None
        if _minor(cfg.release) >= (0, 14) or ki.infer_attention_backend(  # the automatic choice must not move too
            cfg.release, arch=arch, env=cfg.env or {}
        ) == ki.infer_attention_backend(cfg.release, arch=cfg.arch, env=cfg.env or {}):
            yield "archs", rep(cfg, arch=arch)
    if a.get("attention_backends"):
        assert cfg.release is not None
        allowed = (
            BACKENDS
            if _minor(cfg.release) >= (0, 14)
            else tuple(
                b
                for b in ("ROCM_AITER_FA", "TRITON_ATTN")
                if b
                in {  # what the switches can make vLLM pick there
                    ki.infer_attention_backend(
                        cfg.release,
                        arch=cfg.arch,
                        env={**(cfg.env or {}), "VLLM_ROCM_USE_AITER": a, "VLLM_ROCM_USE_AITER_MHA": m},
                    )
                    for a in ("0", "1")
                    for m in ("0", "1")
                }
            )
        )
        other = _other_value(cfg.attention_backend, allowed, lambda x: x in a["attention_backends"])
        if other:
            yield "attention_backends", rep(cfg, attention_backend=other)
    for name, want in (a.get("switches") or {}).items():
        yield f"switches.{name}", rep(cfg, env={**(cfg.env or {}), name: "0" if want else "1"})
    for key, field, pool in (
        ("kv_cache_dtypes", "kv_cache_dtype", ("auto", "fp8", "bfloat16")),
        ("quantizations", "quantization", ("none", "fp8", "quark")),
        ("speculative_methods", "speculative_method", ("none", "ngram", "eagle")),
    ):
        if a.get(key):
            yield key, rep(cfg, **{field: _other_value(getattr(cfg, field), pool, lambda x, k=key: x in a[k])})
    for key, pool in (("tensor_parallel_size", (1, 2, 4, 8)), ("max_num_seqs", (64, 65, 100, 128, 256))):
        if a.get(key):
            yield (
                key,
                rep(
                    cfg, **{key: _other_value(getattr(cfg, key), pool, lambda n, k=key: ki.Range.of(a[k]).contains(n))}
                ),
            )
    mode = _other_value(cfg.mode, MODES, lambda m: m in a["modes"])
    if mode:  # None: the row holds in every mode
        yield "modes", rep(cfg, mode=mode)


def _agree_in_one_render(chart: Path, tmp: Path, flats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's judgement of every row for each values dict, compared condition by condition with the evaluator's
    (status, unknown, failed, evidence scope, mitigation, refusal); returns the chart's results."""
    got = probe(chart, tmp, configs=[_nested(f) for f in flats])["configs"]
    for flat, chart_ki in zip(flats, got, strict=True):
        cfg = config_from_values(flat)
        blocking = {m.issue.id for m in DATA.blocking(cfg, tuple(flat.get("allowKnownIssues", ())))}
        for want, row in zip(DATA.evaluate(cfg), chart_ki["matches"], strict=True):
            where = f"{want.issue.id} for {flat}\n{cfg}\nchart {row}"
            assert row["id"] == want.issue.id and row["status"] == want.status, where
            assert sorted(row["unknown"]) == sorted(want.unknown), where
            assert sorted(row["failed"]) == sorted(want.failed), where
            assert (row["scope"] or None) == want.scope, where
            assert (row["mitigatedBy"] or None) == want.mitigated_by, where
            assert row["blocking"] == (want.issue.id in blocking), where
    return got


@pytest.mark.parametrize("issue", DATA.issues, ids=[i.id for i in DATA.issues])
def test_chart_and_evaluator_agree_on_the_row(issue: ki.Issue, probe_chart: Path, tmp_path: Path) -> None:
    example = ki.example_config(issue)
    values = values_for(example)
    cfg = config_from_values(values)
    # The model's architecture is not a chart value: a row that needs one is at most `possible` in the chart.
    needs_architecture = bool(issue.affects.get("architectures")) or any("architectures" in s for s in issue.scope)
    status = DATA.match(issue, cfg).status
    assert status == (ki.POSSIBLE if needs_architecture else ki.APPLIES), f"{issue.id}: {cfg}"
    with_architecture = dataclasses.replace(cfg, architecture=example.architecture)
    assert status == ki.APPLIES or DATA.match(issue, with_architecture).status == ki.APPLIES
    refusable = issue.verified and issue.symptom in ki.BLOCKING_SYMPTOMS and not needs_architecture
    # The trigger and the trigger with one condition moved off the row, judged row by row in one render.
    moved = list(perturbations(issue, example))
    assert moved, "every row has a condition the chart can move off"
    offs = [values_for(m) for _, m in moved]
    for (what, m), off in zip(moved, offs, strict=True):
        assert DATA.match(issue, config_from_values(off)).status == ki.NO, (issue.id, what, m)
    if not refusable:
        # The chart can never refuse this row: one probe render checks the whole judgement of every config.
        _agree_in_one_render(probe_chart, tmp_path, [values, *offs])
        return
    # A row the chart refuses: the real render, its message, the escape hatch and the image's patches.
    blocked = check_agrees(values)
    assert issue.id in blocked
    # Accepted knowingly: renders, and NOTES says so.
    allow = tuple(sorted(blocked))
    assert check_agrees({**values, "allowKnownIssues": list(allow)}, allow) == set()
    if not verdict({**values, "allowKnownIssues": list(allow)}).other:
        text = notes({**values, "allowKnownIssues": list(allow)})
        for i in allow:
            assert f"ALLOWED by allowKnownIssues (refused otherwise): {i} [" in text, text
    # Only this row allowed: the others still refuse.
    assert check_agrees({**values, "allowKnownIssues": [issue.id]}, (issue.id,)) == blocked - {issue.id}
    # The image's patches: this project's image for each release the row has a patch for.
    for release in issue.patches:
        if not issue.vllm.contains(release):
            continue
        patched = values_for(dataclasses.replace(example, release=release), **{"vllm.patched": True})
        assert issue.id not in check_agrees(patched)
        assert DATA.match(issue, config_from_values(patched)).mitigated
        # An image at another patch level that lacks this fix (its label lists other ids) is not mitigated.
        others = [
            i
            for i in DATA.fixed_by(series_patches(release))
            if DATA.get(i).patches.get(release) != issue.patches[release]
        ]
        if others:
            assert issue.id in check_agrees({**patched, "vllm.fixesIssues": others})
    # One condition off: no refusal from this row, and the chart agrees on the rest.
    for off in offs:
        assert issue.id not in check_agrees(off)


def test_refusal_names_the_mitigation_and_the_way_out() -> None:
    issue = DATA.get("aiter-fa-full-cudagraph-always")
    values = values_for(ki.example_config(issue))
    err = render_error(values)
    assert REFUSAL in err
    assert issue.advice() in err
    assert "In values: compilation.cudagraphMode=PIECEWISE or compilation.cudagraphMode=FULL_AND_PIECEWISE" in err
    assert "vllm-0.10.2/0001-rocm-aiter-fa-uniform-single-token-decode.patch: vllm.patched=true" in err
    assert "allowKnownIssues: [aiter-fa-full-cudagraph-always]" in err
    assert "here: vLLM 0.10.2, attention backend ROCM_AITER_FA" in err
    fp8 = DATA.get("aiter-fa-fp8-kv-cache-fnuz-view")
    err = render_error(values_for(ki.example_config(fp8)))
    assert fp8.advice() in err and "In values: aiter.mha=false" in err


# --- random configurations -----------------------------------------------------------------------------------------


def random_values(rng: random.Random) -> dict[str, Any]:
    release = rng.choice(
        [
            "0.10.1",
            "0.10.1.1",
            "0.10.2",
            "0.10.2+rocm700",
            "0.10.2rc1",
            "0.10.2.dev383+g1a.rocm700",
            "0.11.0",
            "0.11.0rc1",
            "0.11.1rc1",
            "0.13.0",
            "0.14.0",
            "0.15.0.dev1",
            "0.15.0rc1",
            "0.15.0",
            "0.18.1",
            "0.19.0",
            "0.20.0",
            "0.22.1",
            "0.26.0",
            "0.28.0",
            "0.29.0",
            "0.30.0",
            "0.31.0",
            "0.33.0",
            "0.34.0",
            "0.34.0.post1",
        ]
    )
    patched = rng.random() < 0.5
    values: dict[str, Any] = {
        "vllm.release": release,
        "vllm.patched": patched,
        "rocm.version": rng.choice(["", "6.4.1", "7.0.0", "7.2.0", "7.2.3", "7.2.4"]),
        "rocm.gpuArch": rng.choice(["", "gfx942", "gfx950", "gfx90a", "gfx1100", "gfx942:sramecc+:xnack-"]),
        "aiter.enabled": rng.random() < 0.6,
        "aiter.mha": rng.random() < 0.7,
        "attentionBackend": rng.choice(("",) + BACKENDS) if _minor(release) >= (0, 14) else "",
        "kvCacheDtype": rng.choice(["", "auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"]),
        "quantization": rng.choice(["", "none", "quark", "fp8", "mxfp4"]),
        "speculativeConfig": rng.choice(
            [
                {},
                {},
                {"method": "eagle3"},
                {"method": "EAGLE"},
                {"method": "mtp"},
                {"method": "ngram"},
                {"num_speculative_tokens": 2},
            ]
        ),
        "tensorParallelSize": rng.choice([1, 2, 4, 8]),
        "maxNumSeqs": rng.choice([0, 32, 64, 65, 100, 128, 256]),
        "compilation.cudagraphMode": rng.choice(MODES),
        "enforceEager": rng.random() < 0.15,
        "extraEnv": rng.choice(
            [
                [],
                [],
                [{"name": "VLLM_ROCM_USE_AITER_MOE", "value": rng.choice(["0", "1", "true", "TRUE", "yes"])}],
                [
                    {"name": "VLLM_FP8_MOE_REQUANT", "value": rng.choice(["mxfp4", "MXFP4", "none"])},
                    {"name": "VLLM_FP8_MOE_REQUANT_ACT", "value": rng.choice(["a4w4", "a8w4"])},
                ],
                [{"name": "VLLM_ROCM_USE_AITER_CUSTOM_AR", "value": rng.choice(["0", "1"])}],
            ]
        ),
    }
    if patched and rng.random() < 0.3:
        values["vllm.fixesIssues"] = rng.sample([i.id for i in DATA.issues], 2)
    if rng.random() < 0.3:
        values["allowKnownIssues"] = rng.sample([i.id for i in DATA.issues], 3)
    return values


def test_random_configurations_agree_row_by_row(probe_chart: Path, tmp_path: Path) -> None:
    rng = random.Random(20260311)
    flats = [random_values(rng) for _ in range(300)]
    got = []  # in chunks: one render per 50 configurations keeps each helm call far below its timeout
    for start in range(0, len(flats), 50):
        got += _agree_in_one_render(probe_chart, tmp_path, flats[start : start + 50])
    statuses: dict[str, int] = {}
    for flat, chart in zip(flats, got, strict=True):
        cfg = config_from_values(flat)
        for want, row in zip(DATA.evaluate(cfg), chart["matches"], strict=True):
            assert row["advice"] == want.issue.advice(), want.issue.id
            statuses[want.status] = statuses.get(want.status, 0) + 1
        assert chart["fixes"] == DATA.fixed_by(cfg.patches), (flat, chart["fixes"])
    # The draw reaches every outcome, or the comparison above proves little.
    assert min(statuses.get(s, 0) for s in (ki.APPLIES, ki.POSSIBLE, ki.NO)) >= 50, statuses


# --- what the chart does not know, the switches, the values ---------------------------------------------------------

MXFP4 = {
    "vllm.release": "0.26.0",
    "vllm.patched": False,
    "aiter.enabled": True,
    "quantization": "quark",
    "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
    "attentionBackend": "ROCM_ATTN",
}


def test_unknown_facts_leave_rows_possible_in_notes_never_refused() -> None:
    assert DATA.get("aiter-mxfp4-moe-graph-unsafe").verified
    assert verdict({**MXFP4, "rocm.gpuArch": "gfx950"}).refused == {"aiter-mxfp4-moe-graph-unsafe"}
    text = notes(MXFP4)  # arch unknown
    assert "possible (set rocm.gpuArch to decide): aiter-mxfp4-moe-graph-unsafe [wrong_tokens]" in text
    text = notes({**MXFP4, "rocm.gpuArch": "gfx950", "quantization": ""})  # quantization from the checkpoint
    assert "possible (set quantization to decide): aiter-mxfp4-moe-graph-unsafe" in text
    # A switch from a Secret: unknown, so possible...
    secret = [{"name": "VLLM_ROCM_USE_AITER_MOE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    text = notes({**MXFP4, "rocm.gpuArch": "gfx950", "extraEnv": secret})
    assert "possible (set extraEnv (a VLLM_* switch from a Secret or ConfigMap) to decide): aiter-mxfp4" in text
    # ...unless another switch the chart knows already rules the row out.
    assert "aiter-mxfp4" not in notes({**MXFP4, "rocm.gpuArch": "gfx950", "extraEnv": secret, "aiter.enabled": False})
    # A literal value is read as vLLM reads it.
    off = [{"name": "VLLM_ROCM_USE_AITER_MOE", "value": "False"}]
    assert verdict({**MXFP4, "rocm.gpuArch": "gfx950", "extraEnv": off}).refused == set()
    on = [{"name": "VLLM_ROCM_USE_AITER_MOE", "value": "TRUE"}]
    assert verdict({**MXFP4, "rocm.gpuArch": "gfx950", "extraEnv": on}).refused == {"aiter-mxfp4-moe-graph-unsafe"}
    # maxNumSeqs 0 is vLLM's default, which depends on the GPU's memory: the chart does not guess it.
    splitk = {"vllm.release": "0.26.0", "rocm.gpuArch": "gfx950", "compilation.cudagraphMode": "FULL"}
    assert verdict(splitk).refused == set()
    assert "possible (set maxNumSeqs to decide): mrv2-capture-stream-aiter-splitk" in notes(splitk)
    assert verdict({**splitk, "maxNumSeqs": 128}).refused == {"mrv2-capture-stream-aiter-splitk"}
    assert verdict({**splitk, "maxNumSeqs": 64}).refused == set()


def test_automatic_backend_from_0_19_is_unknown() -> None:
    row = DATA.get("rocm-attn-full-decode-capture-fault")  # unverified: reported, never refused
    fault = {"vllm.release": "0.20.0", "compilation.cudagraphMode": "FULL_DECODE_ONLY", "rocm.gpuArch": "gfx942"}
    assert verdict(fault).refused == set()
    assert f"possible (set attentionBackend to decide): {row.id} [crash, unverified]" in notes(fault)


def test_triton_full_capture_fault_is_possible_outside_the_reports() -> None:
    """Issue 19: aiter.enabled=false with the default mode on MI300X (TRITON_ATTN, FULL_AND_PIECEWISE on 0.14-0.18)
    is decided by the evidence, one model on one dev build: `possible`, listed in NOTES, not refused. The chart does
    not know the model's architecture; the sidecar does and refuses readiness for the reported models."""
    row = "triton-attn-rocm-full-capture-fault"
    for release in ("0.14.0", "0.17.1", "0.18.0"):
        default = {"vllm.release": release, "vllm.patched": False, "aiter.enabled": False, "rocm.gpuArch": "gfx942"}
        assert verdict(default).refused == set(), release
        assert config_from_values(default).attention_backend == "TRITON_ATTN"
        text = notes(default)
        assert (
            f"possible (the reports cover some models or GPUs only, and the chart does not know the model's "
            f"architecture: the sidecar judges the running model; not refused): {row} [crash]" in text
        ), text
    # explicit TRITON_ATTN on 0.20, and 0.13 (the first release with the buffers): the same
    assert verdict({"vllm.release": "0.20.0", "attentionBackend": "TRITON_ATTN"}).refused == set()
    assert row not in notes({"vllm.release": "0.12.0", "aiter.enabled": False, "rocm.gpuArch": "gfx942"})
    assert row in notes({"vllm.release": "0.13.0", "aiter.enabled": False, "rocm.gpuArch": "gfx942"})


def test_fixes_issues_and_allow_list_must_name_rows() -> None:
    err = render_error({"allowKnownIssues": ["no-such-issue"]})
    assert "allowKnownIssues[0]=no-such-issue: no known issue has this id" in err
    assert "aiter-fa-full-cudagraph-always" in err  # the ids it could have meant
    err = render_error({"vllm.fixesIssues": ["aiter-fa-full-cudagraph-always", "typo"]})
    assert "vllm.fixesIssues[1]=typo: no known issue has this id" in err
    err = render_error({"vllm.patched": False, "vllm.fixesIssues": ["aiter-fa-full-cudagraph-always"]})
    assert "vllm.patched=false" in err and "io.vllm-rocm.fixes-issues" in err
    for bad, where in (
        ({"allowKnownIssues": ["Bad Id"]}, "/allowKnownIssues/0"),
        ({"allowKnownIssues": "aiter-fa-full-cudagraph-always"}, "/allowKnownIssues"),
        ({"allowKnownIssues": ["aiter-fa-full-cudagraph-always"] * 2}, "/allowKnownIssues"),
        ({"vllm.fixesIssues": ["X"]}, "/vllm/fixesIssues/0"),
        ({"rocm.version": "seven"}, "/rocm/version"),
        ({"rocm.gpuArch": "MI300X"}, "/rocm/gpuArch"),
        ({"rocm.extra": 1}, "additional properties 'extra' not allowed"),
        ({"quantization": "FP8 "}, "/quantization"),
    ):
        assert where in render_error(bad), bad


def test_release_must_be_pep440() -> None:
    assert "is not a PEP 440 version" in render_error({"vllm.release": "0.10.2-foo"})
    for ok in ("0.11.0rc1", "0.15.0.dev1", "0.10.2+rocm700"):
        assert render({"vllm.release": ok, "compilation.cudagraphMode": "PIECEWISE"})


def test_quantization_value_renders_the_flag() -> None:
    args = container(pod_spec(render({"quantization": "quark"})), "vllm")["args"]
    assert args[args.index("--quantization") + 1] == "quark"
    for v in ("", "none"):
        assert "--quantization" not in container(pod_spec(render({"quantization": v})), "vllm")["args"]


def test_sidecar_gets_the_rocm_facts() -> None:
    def env(values: dict[str, Any]) -> dict[str, Any]:
        return {e["name"]: e.get("value") for e in container(pod_spec(render(values)), "health")["env"]}

    got = env({"rocm.version": "7.0.0", "rocm.gpuArch": "gfx942"})
    assert got["VLLM_HEALTH_ROCM_VERSION"] == "7.0.0" and got["VLLM_HEALTH_GPU_ARCH"] == "gfx942"
    assert "VLLM_HEALTH_ROCM_VERSION" not in env({}) and "VLLM_HEALTH_GPU_ARCH" not in env({})


@pytest.mark.parametrize("spelled", spellings("0.10.2"))
def test_the_sidecar_judges_every_spelling_as_the_chart_does(spelled: str) -> None:
    """The spellings above through both doors: the chart's guard (values) and the sidecar (vLLM's engine line with
    that version, parsed and judged as at run time). A row the chart refuses is one the sidecar keeps the pod out
    for, and the other way round (issue 30: `1!0.10.2` matched no row in the sidecar while the chart refused it)."""
    from vllm_rocm_health.known_issues import KnownIssueJudge
    from vllm_rocm_health.state import LogState

    issue = DATA.get("aiter-fa-full-cudagraph-always")
    log = (ROOT / "health" / "fixtures" / "v0.10.2-image-aiter-fa-full-fp8kv.log").read_text()
    state = LogState()
    for line in log.replace("engine (v0.10.2)", f"engine (v{spelled})").splitlines():
        state.feed(line)
    assert state.engine.version == spelled
    judge = KnownIssueJudge(environ={"VLLM_HEALTH_GPU_ARCH": "gfx942"})
    sidecar = {b.split(":")[0] for b in judge.blocking(state, ())[1]}
    values = {**values_for(ki.example_config(issue)), "vllm.release": spelled, "rocm.gpuArch": "gfx942"}
    err = render_error(values)
    assert issue.id in sidecar, (spelled, sidecar)
    if "does not match pattern" in err and "/vllm/release" in err:
        return  # the schema refuses the spelling as a whole (epochs): refused at both doors
    assert sidecar == {m.group(1) for m in ROW.finditer(err)}, (spelled, sidecar, err[-800:])
