"""known-issues/known-issues.json and its evaluator: the data is well-formed and verified where it says so, every
row triggers on its own conditions and on nothing else, evidence scope, refusal semantics, backend names and the
automatic backend, every thread the project cites is a row, and the README tables are in step."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_rocm_known_issues import evaluator as ki
from vllm_rocm_patches import series

from tests.support.repo import markdown_files
from tests.support.vllm_releases import (
    GUARD_RELEASES,
    PATCH_TOOL_PYTHONPATH,
    REPO_ROOT,
    SUPPORTED_VERSIONS,
    release_tree,
)

DIR = REPO_ROOT / "known-issues"
RAW = json.loads((DIR / "known-issues.json").read_text())
DATA = ki.load(DIR / "known-issues.json")
SSET = series.load(REPO_ROOT / "patches")
IDS = [i.id for i in DATA.issues]


def test_data_matches_the_draft7_schema() -> None:
    schema = json.loads((DIR / "schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(RAW)]
    assert errors == []


def test_schema_rejects_what_it_should() -> None:
    validator = jsonschema.Draft7Validator(json.loads((DIR / "schema.json").read_text()))
    for mutate in (
        lambda d: d["issues"][0].pop("verified"),
        lambda d: d["issues"][0].update(symptom="garbage"),
        lambda d: d["issues"][0]["affects"].update(modes=["FULLISH"]),
        lambda d: d["issues"][0]["affects"].update(vllm="0.10.2"),  # a version, not a bound
        lambda d: d["issues"][0]["affects"].update(vllm="<=0.10.2"),  # only >= and <
        lambda d: d["issues"][0]["affects"].update(vllm=">=0.10.2+rocm700"),  # no local label in a bound
        lambda d: d["issues"][0].update(checks=["only one check"]),  # a verified row needs at least two
        lambda d: d["issues"][0]["affects"].update(colour="blue"),
        lambda d: d["issues"][0]["mitigation"].update(refuse=False),  # removed: blocking is one rule everywhere
        lambda d: d["issues"][0].update(evidence_scope=[{"colour": ["blue"]}]),
        lambda d: d["issues"][0].update(evidence_scope=[]),
        lambda d: d["rejected"][0].pop("reason"),
        lambda d: d.update(schema_version=1),
        lambda d: d["issues"][0]["code_condition"].update(bounds="roughly"),
        lambda d: d["issues"][0]["code_condition"].pop("present"),  # neither present nor absent
        lambda d: d["code_probes"]["aiter-fa-declares-always"].update(files=["site-packages/x.py"]),
    ):
        bad = copy.deepcopy(RAW)
        mutate(bad)
        assert not validator.is_valid(bad)


def test_at_least_ten_verified_rows_each_with_evidence() -> None:
    verified = [i for i in DATA.issues if i.verified]
    assert len(verified) >= 10
    for i in verified:
        assert len(i.raw["checks"]) >= 2 and i.raw["evidence"], i.id
        # a verified row names a released file it was checked against, and a thread
        assert any("vLLM 0." in c for c in i.raw["checks"]) and any("thread" in c for c in i.raw["checks"]), i.id
    for i in DATA.issues:
        if not i.verified:  # an unverified row says why
            assert any(c.startswith("unverified:") or " unverified:" in c for c in i.raw["checks"]), i.id


def test_rows_reach_the_newest_release_checked() -> None:
    """An open row (no first fixed release) holds on the newest release on PyPI the data was checked against, unless
    its checks say why its upper bound is there."""
    newest = RAW["releases_checked_up_to"]
    for i in DATA.issues:
        if not i.first_fixed and not i.vllm.contains(newest):
            assert any("upper bound" in c for c in i.raw["checks"]), (i.id, newest)
    fixed_later = [
        i.id for i in DATA.issues if i.first_fixed and ki.Version.parse(i.first_fixed) > ki.Version.parse(newest)
    ]
    assert fixed_later == []


def test_patches_named_by_rows_exist_and_every_patch_fixes_a_row() -> None:
    named = {(rel, name) for i in DATA.issues for rel, name in i.patches.items()}
    in_series = {(rs.release, e.patch_name) for rs in SSET.releases.values() for e in rs.entries if e.patch_name}
    assert named <= in_series, named - in_series
    assert in_series <= named, f"patches that fix no known issue: {in_series - named}"
    for rel, _ in named:
        assert rel in SUPPORTED_VERSIONS


def _contradicting(issue: ki.Issue, cond: str, want, cfg: ki.Config):  # noqa: ANN001, ANN202 - a Config field value
    if cond == "vllm":
        spec = ki.SpecifierSet(want)
        return next((v for v in ("0.1.0", "99.0.0") if not spec.contains(v)), None)
    if cond == "rocm":
        spec = ki.SpecifierSet(want)
        return next((v for v in ("5.7.0", "99.0.0") if not spec.contains(v)), None)
    if cond == "modes":
        return next((m for m in ki.MODES if m not in want), None)
    if cond == "switches":
        flipped = {k: ("0" if v else "1") if isinstance(v, bool) else "other" for k, v in want.items()}
        return {**(cfg.env or {}), **flipped}
    if cond in ki.RANGE_CONDITIONS:
        r = ki.Range.of(want)
        return next(n for n in range(1, 1000) if not r.contains(n))
    if cond == "attention_backends":
        return next(b for b in ("TRITON_ATTN", "ROCM_ATTN", "ROCM_AITER_FA") if b not in want)
    if cond == "architectures":
        return "SomethingElseForCausalLM"
    if cond == "archs":
        return "gfx1201"
    return "something-else"


@pytest.mark.parametrize("issue_id", IDS)
def test_each_row_triggers_on_its_example_and_each_condition_matters(issue_id: str) -> None:
    issue = DATA.get(issue_id)
    cfg = ki.example_config(issue)
    m = DATA.match(issue, cfg)
    assert m.status == ki.APPLIES and m.unknown == [] and m.failed == [], m
    assert m.scope in (None, ki.INSIDE)
    # every condition the row sets: an unknown value makes it possible, a contradicting value makes it not apply
    for cond in ki.CONDITIONS:
        if cond not in ("vllm", "modes") and not issue.affects.get(cond):
            continue
        field = ki.FIELDS[cond]
        assert DATA.match(issue, dataclasses.replace(cfg, **{field: None})).status == ki.POSSIBLE, cond
        other = _contradicting(issue, cond, issue.affects[cond], cfg)
        if other is not None:
            assert DATA.match(issue, dataclasses.replace(cfg, **{field: other})).status == ki.NO, (cond, other)
    # the evidence scope: outside every alternative (or undecided) is `possible`, never `no` and never refused
    for alternative in issue.scope:
        for cond, want in alternative.items():
            field = ki.FIELDS[cond]
            other = _contradicting(issue, cond, want, cfg)
            for value in (None, other):
                moved = dataclasses.replace(cfg, **{field: value})
                got = DATA.match(issue, moved)
                if got.failed:  # the same condition in `affects` contradicted: that is `no`
                    continue
                assert got.status == ki.POSSIBLE and got.scope in (ki.OUTSIDE, ki.UNDECIDED), (cond, value, got)
                assert issue.id not in {b.issue.id for b in DATA.blocking(moved)}


def test_switches_take_vllms_defaults_and_parsing() -> None:
    assert DATA.switch("VLLM_ROCM_USE_AITER", {}) is False
    assert DATA.switch("VLLM_ROCM_USE_AITER_MHA", {}) is True  # envs.py default "True"
    assert DATA.switch("VLLM_ROCM_USE_AITER", {"VLLM_ROCM_USE_AITER": "TRUE"}) is True
    assert DATA.switch("VLLM_ROCM_USE_AITER", {"VLLM_ROCM_USE_AITER": "yes"}) is False  # vLLM: "true"/"1" only
    assert DATA.switch("VLLM_FP8_MOE_REQUANT", {}) == "none"  # a string switch (env_with_choices, any case)
    assert DATA.switch_matches("VLLM_FP8_MOE_REQUANT", "mxfp4", {"VLLM_FP8_MOE_REQUANT": " MXFP4 "})
    assert not DATA.switch_matches("VLLM_FP8_MOE_REQUANT", "mxfp4", {})


def test_blocking_semantics() -> None:
    seed = DATA.get("aiter-fa-full-cudagraph-always")
    cfg = ki.example_config(seed)
    assert [m.issue.id for m in DATA.blocking(cfg)] == [seed.id]
    # the series' patch for the release mitigates it
    patched = dataclasses.replace(cfg, patches=frozenset({seed.patch_id("0.10.2")}))
    assert DATA.blocking(patched) == [] and DATA.match(seed, patched).mitigated_by == seed.patch_id("0.10.2")
    assert DATA.blocking(cfg, allow=[seed.id]) == []  # the explicit escape hatch
    assert DATA.blocking(dataclasses.replace(cfg, mode="PIECEWISE")) == []  # a safe mode
    assert DATA.blocking(dataclasses.replace(cfg, release="0.11.0")) == []  # fixed upstream
    assert DATA.blocking(dataclasses.replace(cfg, mode=None)) == []  # unknown: possible, never a refusal
    # AMD's builds of the release, and its pre-releases and dev builds, are that release
    for build in ("0.10.2+rocm700", "0.10.2rc1", "0.10.2rc3", "0.10.2.dev383+g1234abc.rocm700"):
        assert seed.id in {m.issue.id for m in DATA.blocking(dataclasses.replace(cfg, release=build))}, build
    # a dev build or rc of the fixing release is not assumed fixed; its final and post releases are
    for build, blocked in (
        ("0.11.0rc1", True),
        ("0.11.0.dev5+g1", True),
        ("0.11.0", False),
        ("0.11.0+rocm700", False),
        ("0.11.0.post1", False),
    ):
        assert (seed.id in {m.issue.id for m in DATA.blocking(dataclasses.replace(cfg, release=build))}) is blocked
    # the patch is for the final release: a pre-release of it is not mitigated by its name
    assert DATA.blocking(dataclasses.replace(patched, release="0.10.2rc1"))
    # unverified rows and slow / oom / hang rows never block, even when they apply
    for i in DATA.issues:
        if not i.verified or i.symptom not in ki.BLOCKING_SYMPTOMS:
            c = ki.example_config(i)
            assert i.id not in {m.issue.id for m in DATA.blocking(c)}, i.id


def test_prereleases_between_two_rows_match_both() -> None:
    """0.10.2rc1 may hold 0.10.1.x's dead flag or 0.10.2's ALWAYS: both rows apply (audit of issue 19)."""
    dead, always = DATA.get("aiter-fa-cudagraph-dead-flag"), DATA.get("aiter-fa-full-cudagraph-always")
    for build in ("0.10.2rc1", "0.10.2.dev383+g1234abc.rocm700"):
        cfg = dataclasses.replace(ki.example_config(always), release=build)
        assert {dead.id, always.id} <= {m.issue.id for m in DATA.blocking(cfg)}, build


def test_triton_full_capture_fault_bounds_and_scope() -> None:
    """From the code: the first release with the persistent softmax_segm_* buffers and ALWAYS is 0.13.0; refused only
    inside the reported GPU/model pairs; MI300X with another model (the default mode with aiter.enabled=false on
    0.14-0.18) is `possible`."""
    row = DATA.get("triton-attn-rocm-full-capture-fault")
    base = ki.Config(
        release="0.14.0",
        arch="gfx942",
        attention_backend="TRITON_ATTN",
        mode="FULL_AND_PIECEWISE",
        env={},
        architecture="LlamaForCausalLM",
    )
    assert DATA.match(row, base).status == ki.POSSIBLE and DATA.match(row, base).scope == ki.OUTSIDE
    assert row.id not in {m.issue.id for m in DATA.blocking(base)}
    step = dataclasses.replace(base, architecture="Step3p5ForCausalLM")
    assert row.id in {m.issue.id for m in DATA.blocking(step)}
    assert DATA.match(row, dataclasses.replace(step, architecture=None)).scope == ki.UNDECIDED
    assert DATA.match(row, dataclasses.replace(step, release="0.12.0")).status == ki.NO
    for build in ("0.13.0", "0.13.0rc1", "0.34.0"):
        assert DATA.match(row, dataclasses.replace(step, release=build)).status == ki.APPLIES, build
    rdna = dataclasses.replace(base, arch="gfx1100", architecture="DeepseekOCRForCausalLM")
    assert row.id in {m.issue.id for m in DATA.blocking(rdna)}


# Issue 34: the bounds and scopes decided from the code of every release and the threads; each row judged on its own
# example configuration with only the release (and the named field) changed. dev and rc builds of the reported release
# are included: a dev build counts as its final release for `>=`, and is not assumed fixed for `<`.
ISSUE_34_BOUNDS = [
    # ROCM_ATTN declares full decode graphs from 0.11.0; vllm#36180 was a 0.16.1rc1.dev234 build (Llama)
    ("rocm-attn-full-decode-capture-fault", "0.16.1rc1.dev234+g1d599c076", {}, ki.APPLIES),
    ("rocm-attn-full-decode-capture-fault", "0.17.0", {}, ki.APPLIES),
    ("rocm-attn-full-decode-capture-fault", "0.16.0", {}, ki.POSSIBLE),  # the code allows it, no report covers it
    ("rocm-attn-full-decode-capture-fault", "0.11.0rc1", {}, ki.POSSIBLE),
    ("rocm-attn-full-decode-capture-fault", "0.10.2", {}, ki.NO),
    # Quark W4A4 on gfx950 reaches AITER's native MXFP4 MoE from 0.11.1; reports from 0.22.1rc1
    ("aiter-mxfp4-moe-graph-unsafe", "0.22.1rc1", {}, ki.APPLIES),
    ("aiter-mxfp4-moe-graph-unsafe", "0.13.0", {}, ki.POSSIBLE),
    ("aiter-mxfp4-moe-graph-unsafe", "0.11.1", {}, ki.POSSIBLE),
    ("aiter-mxfp4-moe-graph-unsafe", "0.11.0", {}, ki.NO),
    # sliding-window decode back on unified_attention from 0.23.0
    ("aiter-fa-sliding-window-decode-unified-again", "0.23.0rc1", {}, ki.APPLIES),
    ("aiter-fa-sliding-window-decode-unified-again", "0.34.0", {}, ki.APPLIES),
    ("aiter-fa-sliding-window-decode-unified-again", "0.22.1", {}, ki.NO),
    ("aiter-fa-sliding-window-decode-capture-fault", "0.18.0rc1", {}, ki.APPLIES),  # not assumed to hold #36042
    ("aiter-fa-sliding-window-decode-capture-fault", "0.18.0", {}, ki.NO),
    # ROCm/aiter#4888: AITER on, TP 2-8, gfx942, the fused op from 0.21.0; reports 0.26.1rc1.dev668, TP8
    ("glm-first-request-after-idle-piecewise", "0.26.1rc1.dev668+g3ee2df303", {}, ki.APPLIES),
    ("glm-first-request-after-idle-piecewise", "0.21.0", {}, ki.POSSIBLE),
    ("glm-first-request-after-idle-piecewise", "0.20.2", {}, ki.NO),
    ("glm-first-request-after-idle-piecewise", "0.27.0", {"architecture": "Qwen3ForCausalLM"}, ki.APPLIES),
    ("glm-first-request-after-idle-piecewise", "0.27.0", {"tensor_parallel_size": 4}, ki.POSSIBLE),
    ("glm-first-request-after-idle-piecewise", "0.27.0", {"tensor_parallel_size": 16}, ki.NO),  # never 1-stage
    ("glm-first-request-after-idle-piecewise", "0.27.0", {"env": {}}, ki.NO),  # AITER off: no fusion
    ("glm-first-request-after-idle-piecewise", "0.27.0", {"mode": "FULL"}, ki.POSSIBLE),
    ("glm-first-request-after-idle-piecewise", "0.27.0", {"mode": "FULL_DECODE_ONLY"}, ki.NO),
    # ROCm forces PIECEWISE with DCP up to 0.28.x
    ("mtp-dcp-full-and-piecewise-corruption", "0.29.0", {}, ki.APPLIES),
    ("mtp-dcp-full-and-piecewise-corruption", "0.29.1rc1.dev187", {}, ki.APPLIES),
    ("mtp-dcp-full-and-piecewise-corruption", "0.28.0", {}, ki.NO),
    ("mtp-dcp-full-and-piecewise-corruption", "0.28.1rc1.dev681", {}, ki.NO),
    # AITER MLA verify with qlen > 4 on gfx942: every mode, from 0.14.0; reports on the 0.27+ persistent path
    ("aiter-mla-gfx942-mtp-verify", "0.27.0", {"mode": "NONE"}, ki.APPLIES),
    ("aiter-mla-gfx942-mtp-verify", "0.27.0", {"mode": "PIECEWISE"}, ki.APPLIES),
    ("aiter-mla-gfx942-mtp-verify", "0.26.0", {}, ki.POSSIBLE),
    ("aiter-mla-gfx942-mtp-verify", "0.14.0rc1", {}, ki.POSSIBLE),
    ("aiter-mla-gfx942-mtp-verify", "0.13.0", {}, ki.NO),
    ("aiter-mla-gfx942-mtp-verify", "0.27.0", {"kv_cache_dtype": "fp8"}, ki.NO),
    # split-K: gfx942 shares the path (#53238), the reports are gfx950
    ("mrv2-capture-stream-aiter-splitk", "0.28.0", {"arch": "gfx942"}, ki.POSSIBLE),
    ("mrv2-capture-stream-aiter-splitk", "0.28.0", {"arch": "gfx950"}, ki.APPLIES),
    ("mrv2-capture-stream-aiter-splitk", "0.29.0rc1", {"arch": "gfx950"}, ki.APPLIES),
    ("mrv2-capture-stream-aiter-splitk", "0.29.0", {"arch": "gfx950"}, ki.NO),
    ("aiter-splitk-capture-stream-open", "0.34.0", {"arch": "gfx942"}, ki.POSSIBLE),
    # MiniMax-M3: reported on a 0.22.1rc1 dev build of a branch image; the model is in the 0.24.0 registry
    ("minimax-m3-fp8-kv-cache-dtype-mismatch", "0.22.1rc1.dev490", {}, ki.APPLIES),
    ("minimax-m3-fp8-kv-cache-dtype-mismatch", "0.24.0", {}, ki.APPLIES),
    # ROCm profiles graph memory from 0.26.0 (#48526 on #44825)
    ("rocm-capture-memory-oom", "0.26.0rc1", {}, ki.APPLIES),
    ("rocm-capture-memory-oom", "0.25.1", {}, ki.APPLIES),
    ("rocm-capture-memory-oom", "0.26.0", {}, ki.NO),
    # the 0.19 hang: ROCm 7.2 and TP >= 2 (RCCL lead), every mode; reported on 0.19.0
    ("rocm-capture-hang-0-19", "0.19.0", {"mode": "NONE"}, ki.APPLIES),
    ("rocm-capture-hang-0-19", "0.18.0", {}, ki.POSSIBLE),
    ("rocm-capture-hang-0-19", "0.19.0", {"rocm": "7.1.1"}, ki.NO),
    ("rocm-capture-hang-0-19", "0.19.0", {"tensor_parallel_size": 1}, ki.NO),
    ("rocm-capture-hang-0-19", "0.19.0", {"rocm": None}, ki.POSSIBLE),
    # ROCM_AITER_MLA_SPARSE captures full decode graphs from 0.18.0
    ("hip-graph-replay-stale-scalar-read-gfx950", "0.18.0", {}, ki.APPLIES),
    ("hip-graph-replay-stale-scalar-read-gfx950", "0.18.0rc1", {}, ki.APPLIES),
    ("hip-graph-replay-stale-scalar-read-gfx950", "0.17.1", {}, ki.NO),
    # new rows: fixed in a release, pre-releases of the fix still affected
    ("aiter-fa-sliding-window-ignored-in-decode", "0.11.2", {}, ki.APPLIES),
    ("aiter-fa-sliding-window-ignored-in-decode", "0.12.0rc1", {}, ki.APPLIES),
    ("aiter-fa-sliding-window-ignored-in-decode", "0.12.0", {}, ki.NO),
    ("aiter-fa-paged-decode-small-head-and-sliding-window-dev-builds", "0.16.1rc1.dev234", {}, ki.APPLIES),
    ("aiter-fa-paged-decode-small-head-and-sliding-window-dev-builds", "0.17.0rc1", {}, ki.APPLIES),
    ("aiter-fa-paged-decode-small-head-and-sliding-window-dev-builds", "0.16.0", {}, ki.NO),
    ("aiter-fa-paged-decode-small-head-and-sliding-window-dev-builds", "0.17.0", {}, ki.NO),
    ("mrv2-warmup-after-capture-workspace-growth", "0.29.0", {}, ki.APPLIES),
    ("mrv2-warmup-after-capture-workspace-growth", "0.30.0rc1", {}, ki.APPLIES),
    ("mrv2-warmup-after-capture-workspace-growth", "0.30.0", {}, ki.NO),
    ("mrv2-warmup-after-capture-workspace-growth", "0.16.0", {}, ki.NO),
    ("glm53-rocm-mrv1-default-accuracy", "0.31.0", {}, ki.APPLIES),
    ("glm53-rocm-mrv1-default-accuracy", "0.32.0", {}, ki.NO),
    ("glm53-rocm-mrv1-default-accuracy", "0.29.1rc1.dev187", {}, ki.NO),
    ("dsv4-mrv1-narrow-eager-region-dev-builds", "0.27.2rc1.dev92+g4d791d7ac.d20260817", {}, ki.APPLIES),
    ("dsv4-mrv1-narrow-eager-region-dev-builds", "0.28.0rc1", {}, ki.APPLIES),
    ("dsv4-mrv1-narrow-eager-region-dev-builds", "0.27.1", {}, ki.NO),
    ("dsv4-mrv1-narrow-eager-region-dev-builds", "0.28.0", {}, ki.NO),
    ("aiter-allreduce-fusion-graph-replay-corruption", "0.21.0", {}, ki.APPLIES),
    ("aiter-allreduce-fusion-graph-replay-corruption", "0.21.0", {"tensor_parallel_size": 8}, ki.POSSIBLE),
    ("hybrid-prefill-misdispatched-full-decode-graph", "0.27.0", {}, ki.APPLIES),
    ("hybrid-prefill-misdispatched-full-decode-graph", "0.10.1.1", {}, ki.NO),
]


@pytest.mark.parametrize("issue_id, release, changes, expected", ISSUE_34_BOUNDS)
def test_issue_34_bounds(issue_id: str, release: str, changes: dict, expected: str) -> None:
    row = DATA.get(issue_id)
    cfg = dataclasses.replace(ki.example_config(row), release=release, **changes)
    assert DATA.match(row, cfg).status == expected, DATA.match(row, cfg)


def test_issue_34_refusals_stay_inside_the_reports() -> None:
    """Verified rows whose bounds were widened from the code refuse only inside the reports' scope."""
    mxfp4 = DATA.get("aiter-mxfp4-moe-graph-unsafe")
    cfg = ki.example_config(mxfp4)
    assert mxfp4.id in {m.issue.id for m in DATA.blocking(cfg)}
    assert mxfp4.id not in {m.issue.id for m in DATA.blocking(dataclasses.replace(cfg, release="0.13.0"))}
    splitk = DATA.get("mrv2-capture-stream-aiter-splitk")
    cfg = ki.example_config(splitk)
    assert splitk.id in {m.issue.id for m in DATA.blocking(cfg)}
    assert splitk.id not in {m.issue.id for m in DATA.blocking(dataclasses.replace(cfg, arch="gfx942"))}
    swa = DATA.get("aiter-fa-sliding-window-ignored-in-decode")
    cfg = ki.example_config(swa)
    assert swa.id in {m.issue.id for m in DATA.blocking(cfg)}  # Gemma 3 on AITER FA before 0.12
    assert swa.id not in {m.issue.id for m in DATA.blocking(dataclasses.replace(cfg, architecture="LlamaForCausalLM"))}


@pytest.mark.parametrize(
    "release", ["latest", "0.10.x", "0." + "9" * 5000, "0.1234567890", "x" * 300, "1.2.3.4.5.6.7.8.9.10.11"]
)
def test_a_bad_release_is_an_error_not_a_guess(release: str) -> None:
    with pytest.raises(ki.KnownIssuesError):
        DATA.evaluate(ki.Config(release=release))
    with pytest.raises(ki.KnownIssuesError):
        ki.release_report(DATA, release, {})
    with pytest.raises(ki.KnownIssuesError):
        ki.infer_attention_backend(release, env={})


@pytest.mark.parametrize(
    "cfg",
    [
        ki.Config(tensor_parallel_size="8"),
        ki.Config(max_num_seqs=True),
        ki.Config(max_num_seqs=10**12),
        ki.Config(release=0.10),
        ki.Config(env={"VLLM_ROCM_USE_AITER": 1}),
        ki.Config(env=["x"]),
        ki.Config(architecture="A" * 500),
        ki.Config(rocm="7." + "1" * 5000),
    ],
)
def test_a_bad_configuration_is_an_error_not_a_guess(cfg: ki.Config) -> None:
    with pytest.raises(ki.KnownIssuesError):
        DATA.evaluate(cfg)


def test_release_report_for_the_supported_releases() -> None:
    by_release = {r: {row["id"]: row["state"] for row in ki.release_report(DATA, r, {})} for r in SUPPORTED_VERSIONS}
    assert by_release["0.10.2"]["aiter-fa-full-cudagraph-always"] == "fixed-by-series"
    assert by_release["0.10.2"]["aiter-fa-cudagraph-dead-flag"] == "not-affected"
    assert by_release["0.10.1.1"]["aiter-fa-cudagraph-dead-flag"] == "fixed-by-series"
    assert by_release["0.11.0"]["aiter-fa-full-cudagraph-always"] == "fixed-upstream"
    assert by_release["0.33.0"]["triton-attn-rocm-full-capture-fault"] == "unmitigated"
    assert by_release["0.33.0"]["mrv2-capture-stream-aiter-splitk"] == "fixed-upstream"
    rc = {row["id"]: row["state"] for row in ki.release_report(DATA, "0.11.0rc1", {})}
    assert rc["aiter-fa-full-cudagraph-always"] == "unmitigated"  # not assumed fixed


# --- attention backends ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("TRITON_ATTN_VLLM_V1", "TRITON_ATTN"),
        ("triton_attn", "TRITON_ATTN"),
        ("FLASH_ATTN_VLLM_V1", "ROCM_AITER_FA"),
        ("FLASH_ATTN", "ROCM_AITER_FA"),
        ("ROCM_AITER_MLA_VLLM_V1", "ROCM_AITER_MLA"),
        ("ROCM_ATTN", "ROCM_ATTN"),
        ("Using Flash Attention backend on V1 engine.", "ROCM_AITER_FA"),
        ("Using Aiter Flash Attention backend.", "ROCM_AITER_FA"),
        ("Using Triton Attention backend on V1 engine.", "TRITON_ATTN"),
        ("Using Rocm/Aiter Attention backend on V1 engine.", "ROCM_ATTN"),
        ("Using Aiter Unified Attention backend.", "ROCM_AITER_UNIFIED_ATTN"),
        ("Using AITER MLA backend", "ROCM_AITER_MLA"),
        ("Using AITER TRITON MLA backend.", "ROCM_AITER_TRITON_MLA"),
        ("Using Sparse MLA backend.", "ROCM_AITER_MLA_SPARSE"),
        ("AiterFlashAttentionMetadataBuilder", "ROCM_AITER_FA"),
        ("AiterFlashAttentionBackend", "ROCM_AITER_FA"),
        ("TritonAttentionMetadataBuilder", "TRITON_ATTN"),
        ("RocmAttentionBackend", "ROCM_ATTN"),
    ],
)
def test_every_spelling_of_a_backend_is_one_name(name: str, canonical: str) -> None:
    assert ki.canonical_attention_backend(name) == canonical


@pytest.mark.parametrize(
    "name", ["", "TRITON-ATTN", "TRITON_ATN", "Using Flash Attention backend for ViT model.", "x" * 500, None]
)
def test_an_unknown_backend_name_is_an_error_and_unknown_to_the_evaluator(name: object) -> None:
    with pytest.raises(ki.KnownIssuesError):
        ki.canonical_attention_backend(name)  # type: ignore[arg-type]
    if isinstance(name, str) and len(name) < 200:  # in a Config: unknown (possible), never a mismatch (no)
        row = DATA.get("triton-attn-fp8-kv-q-scale-capture")
        cfg = dataclasses.replace(ki.example_config(row), attention_backend=name)
        assert DATA.match(row, cfg).status == ki.POSSIBLE


def test_a_row_triggers_on_every_spelling() -> None:
    row = DATA.get("triton-attn-fp8-kv-q-scale-capture")
    for name in (
        "TRITON_ATTN_VLLM_V1",
        "Using Triton Attention backend on V1 engine.",
        "TritonAttentionMetadataBuilder",
    ):
        cfg = dataclasses.replace(ki.example_config(row), attention_backend=name)
        assert [m.issue.id for m in DATA.blocking(cfg)] == [row.id], name


AITER = {"VLLM_ROCM_USE_AITER": "1"}
# (release, arch, env, explicit) -> what vLLM picks (known_issues.infer_attention_backend's docstring).
INFERENCE = [
    ("0.10.2", None, {}, None, "TRITON_ATTN"),
    ("0.10.2", None, AITER, None, "ROCM_AITER_FA"),
    ("0.10.2rc1", None, AITER, None, "ROCM_AITER_FA"),
    ("0.10.2", "gfx1100", AITER, None, "TRITON_ATTN"),
    ("0.10.2", "gfx942:sramecc+:xnack-", {**AITER, "VLLM_ROCM_USE_AITER_MHA": "0"}, None, "TRITON_ATTN"),
    ("0.10.2", None, AITER, "TRITON_ATTN", "ROCM_AITER_FA"),  # no selection on 0.10.x V1
    ("0.10.2", None, {**AITER, "VLLM_USE_V1": "0"}, None, None),  # V0: not modelled
    ("0.11.0", None, {"VLLM_V1_USE_PREFILL_DECODE_ATTENTION": "1"}, None, "ROCM_ATTN"),
    (
        "0.11.0",
        None,
        {**AITER, "VLLM_USE_AITER_UNIFIED_ATTENTION": "1", "VLLM_ROCM_USE_AITER_MHA": "0"},
        None,
        "ROCM_ATTN",
    ),
    ("0.11.0", None, {"VLLM_ATTENTION_BACKEND": "ROCM_ATTN"}, None, "ROCM_ATTN"),
    (
        "0.11.2",
        None,
        {**AITER, "VLLM_ROCM_USE_AITER_MHA": "0", "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "1"},
        None,
        "ROCM_AITER_UNIFIED_ATTN",
    ),
    ("0.11.2", None, {}, None, "TRITON_ATTN"),
    ("0.12.0", None, AITER, None, "ROCM_AITER_FA"),
    ("0.14.0", None, {**AITER, "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "1"}, None, "ROCM_AITER_UNIFIED_ATTN"),
    ("0.14.0", None, {}, "ROCM_AITER_FA", "ROCM_AITER_FA"),
    ("0.14.0", "gfx1100", {}, "ROCM_AITER_FA", None),
    ("0.14.0", None, {}, "FLASHINFER", None),
    ("0.14.0", None, {"VLLM_ATTENTION_BACKEND": "ROCM_ATTN"}, None, "ROCM_ATTN"),
    ("0.15.0", None, {"VLLM_ATTENTION_BACKEND": "ROCM_ATTN"}, None, "TRITON_ATTN"),  # the variable is gone
    ("0.17.1", None, {}, None, "TRITON_ATTN"),
    ("0.18.0", "gfx90a", AITER, None, "TRITON_ATTN"),
    ("0.18.0", "gfx942", AITER, None, "ROCM_AITER_FA"),
    ("0.19.0", None, AITER, None, None),
    ("0.19.0", None, None, "ROCM_AITER_FA", "ROCM_AITER_FA"),
    ("0.34.0", None, {}, None, None),
    ("0.10.2", None, None, None, None),
    (None, None, AITER, None, None),
]


@pytest.mark.parametrize("release, arch, env, explicit, want", INFERENCE)
def test_the_automatic_backend(release, arch, env, explicit, want) -> None:  # noqa: ANN001
    assert ki.infer_attention_backend(release, arch=arch, env=env, explicit=explicit) == want
    assert ki.infer_attention_backend(release, platform="cuda", arch=arch, env=env, explicit=explicit) is None


@pytest.mark.parametrize("version", [v for v in GUARD_RELEASES if v != "0.10.0"])
def test_the_inference_rests_on_the_released_selection_code(version: str) -> None:
    """The facts infer_attention_backend encodes, read from each release's platforms/rocm.py."""
    text = (release_tree(version) / "vllm" / "platforms" / "rocm.py").read_text()
    minor = tuple(int(x) for x in version.split(".")[:2])
    assert re.search(r'\["gfx90a", "gfx942", "gfx950"\]', text), version  # on_gfx9
    if minor < (0, 11):
        assert re.search(r"VLLM_ROCM_USE_AITER and envs\.VLLM_ROCM_USE_AITER_MHA\s*(\\\s*)?\s*and on_gfx9\(\)", text)
        assert "selected_backend == _Backend.ROCM_ATTN" not in text
    elif minor < (0, 12):
        assert "selected_backend == _Backend.ROCM_ATTN" in text and "VLLM_USE_AITER_UNIFIED_ATTENTION" in text
    elif minor < (0, 18):
        assert "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION" in text and "_get_backend_priorities" not in text
        assert "is only supported on gfx9 architectures" in text
    else:
        priorities = text[text.index("def _get_backend_priorities") :]
        priorities = priorities[: priorities.index("return backends")]
        rocm_attn_first = re.search(r"backends = \[\s*AttentionBackendEnum\.ROCM_ATTN", priorities) or re.search(
            r"backends = \[\]\s*(#[^\n]*\n\s*)*if not use_kv_connector:\s*"
            r"backends\.append\(AttentionBackendEnum\.ROCM_ATTN\)",
            priorities,
        )
        assert (minor >= (0, 19)) == bool(rocm_attn_first), version
        assert "Using %s" in text and "out of potential backends" in text


# --- the threads the project cites ---------------------------------------------------------------------------------

_REF = re.compile(
    r"(?:\b(vllm)|\bROCm/([\w.-]+))?#(\d{3,6})\b|https://github\.com/([\w.-]+)/([\w.-]+)/(?:issues|pull)/(\d+)"
)


def _key(url: str) -> tuple[str, str]:
    m = re.match(r"https://github\.com/([\w.-]+)/([\w.-]+)/(?:issues|pull)/(\d+)", url)
    assert m, url
    return f"{m.group(1)}/{m.group(2)}".lower(), m.group(3)


def cited_threads() -> dict[tuple[str, str], list[str]]:
    """Every vllm#N, ROCm/<repo>#N, bare #N (vLLM) and GitHub thread URL the runbook, the chart, the canary, the
    qualify shapes and any README cite (the generated known-issues table excepted: it is the data)."""
    files = [p for p in markdown_files() if "tests" not in p.relative_to(REPO_ROOT).parts and p != DIR / "README.md"]
    chart = REPO_ROOT / "charts" / "vllm-rocm"
    files += [p for p in (chart / "templates").rglob("*") if p.is_file()]
    files += [p for p in (chart / "files").glob("*.yaml")] + list((chart / "docs").rglob("*.md"))
    files += list((REPO_ROOT / "health" / "src").rglob("*.py"))
    files += list((REPO_ROOT / "qualify" / "src").rglob("*.py"))
    out: dict[tuple[str, str], list[str]] = {}
    for path in set(files):
        for m in _REF.finditer(path.read_text(encoding="utf-8", errors="replace")):
            if m.group(3):
                key = (f"rocm/{m.group(2).lower()}" if m.group(2) else "vllm-project/vllm", m.group(3))
            else:
                key = (f"{m.group(4)}/{m.group(5)}".lower(), m.group(6))
            out.setdefault(key, []).append(str(path.relative_to(REPO_ROOT)))
    return out


def test_every_thread_the_project_cites_is_a_row() -> None:
    rows = {_key(url) for i in DATA.issues for url in i.links}
    cited = cited_threads()
    assert len(cited) >= 10  # the scan finds the runbook's and the READMEs' citations (or proves nothing)
    missing = {f"{k[0]}#{k[1]}": sorted(set(v)) for k, v in cited.items() if k not in rows}
    assert missing == {}, "cited but not a row of known-issues/known-issues.json"


def test_rejected_candidates_are_not_rows_and_say_why() -> None:
    rows = {_key(url) for i in DATA.issues for url in i.links}
    for r in DATA.rejected:
        assert r["reason"] and r["checks"]
        assert not {_key(u) for u in r["links"]} & rows, r["links"]


# --- README, CLI --------------------------------------------------------------------------------------------------


def test_readme_table_is_generated_from_the_data() -> None:
    text = (DIR / "README.md").read_text()
    assert ki.replace_readme_block(text, ki.markdown_table(DATA)) == text, (
        "known-issues/README.md is stale: run `make generate`"
    )
    for issue_id in IDS:
        assert f"[`{issue_id}`]" in text
    for r in DATA.rejected:
        assert r["reason"].replace("|", "\\|") in text
    assert "known-issues/README.md" in (REPO_ROOT / "README.md").read_text()  # linked from the top-level README


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["issues"][0]["affects"].pop("vllm"), "affects.vllm and affects.modes are required"),
        (lambda d: d["issues"][0].update(symptom="meh"), "symptom must be one of"),
        (lambda d: d["issues"][0].update(checks=[]), "must say what was checked"),
        (lambda d: d["issues"][0]["affects"].update(vllm=">=0.10.x"), "PEP 440"),
        (lambda d: d["issues"][0]["affects"].update(vllm="<=0.10.2"), ">=FIRST_AFFECTED"),
        (lambda d: d["issues"][0]["affects"].update(switches={"VLLM_ROCM_NEW": True}), "no entry in switch_defaults"),
        (lambda d: d["issues"][0]["affects"].update(switches={"VLLM_ROCM_USE_AITER": "1"}), "must be a bool"),
        (lambda d: d["issues"][0]["affects"].update(attention_backends=["TRITON_ATTN_VLLM_V1"]), "write the attention"),
        (lambda d: d["issues"][0]["affects"].update(attention_backends=["NOPE_ATTN"]), "not an attention backend"),
        (lambda d: d["issues"][0].update(evidence_scope=[{"colour": ["x"]}]), "unknown conditions"),
        (lambda d: d["issues"][0].update(evidence_scope={"archs": ["gfx942"]}), "evidence_scope must be a list"),
        (lambda d: d["issues"][1].update(id=d["issues"][0]["id"]), "repeated"),
        (lambda d: d.update(schema_version=1), "schema_version"),
        (lambda d: d.update(rejected=[{"links": []}]), "rejected must be"),
    ],
)
def test_loader_refuses_malformed_data(mutate, message: str, tmp_path: Path) -> None:
    bad = copy.deepcopy(RAW)
    mutate(bad)
    path = tmp_path / "ki.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ki.KnownIssuesError, match=message):
        ki.load(path)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_patches", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": PATCH_TOOL_PYTHONPATH, **(env or {})},
    )


def test_cli_judges_a_configuration() -> None:
    r = _cli("known-issues", "--release", "0.10.2", "--backend", "ROCM_AITER_FA", "--mode", "FULL", "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["blocking"] == ["aiter-fa-full-cudagraph-always"]
    r = _cli(
        "known-issues",
        "--release",
        "0.10.2",
        "--backend",
        "ROCM_AITER_FA",
        "--mode",
        "FULL",
        "--patch",
        "vllm-0.10.2/0001-rocm-aiter-fa-uniform-single-token-decode.patch",
    )
    assert r.returncode == 0 and "mitigated by vllm-0.10.2/0001" in r.stdout, r.stdout
    r = _cli("known-issues", "--release", "0.10.2", "--env", "BROKEN")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr
    assert _cli("known-issues").returncode == 0


def test_cli_infers_the_backend_as_the_chart_does() -> None:
    """Issue 19: 0.10.2 with AITER on, mode FULL, no --backend: the chart refuses it, so the CLI blocks too."""
    r = _cli("known-issues", "--release", "0.10.2", "--env", "VLLM_ROCM_USE_AITER=1", "--mode", "FULL", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["blocking"] == ["aiter-fa-full-cudagraph-always"], r.stdout
    assert out["attention_backend"] == {"name": "ROCM_AITER_FA", "how": "inferred: vLLM's automatic choice"}
    r = _cli("known-issues", "--release", "0.10.2rc1", "--env", "VLLM_ROCM_USE_AITER=1", "--mode", "FULL")
    assert r.returncode == 1 and "aiter-fa-full-cudagraph-always [wrong_tokens]: BLOCKS" in r.stdout, r.stdout
    # 0.10.x's own name for Triton: the FP8 KV q_scale row blocks, as with TRITON_ATTN
    for name in ("TRITON_ATTN_VLLM_V1", "TRITON_ATTN"):
        r = _cli(
            "known-issues",
            "--release",
            "0.10.2",
            "--backend",
            name,
            "--kv-cache-dtype",
            "fp8",
            "--mode",
            "FULL_AND_PIECEWISE",
            "--json",
        )
        assert r.returncode == 1 and json.loads(r.stdout)["blocking"] == ["triton-attn-fp8-kv-q-scale-capture"], name
    r = _cli("known-issues", "--release", "0.10.2", "--backend", "TRITON-ATTN")
    assert r.returncode == 2 and "not an attention backend" in r.stderr
    r = _cli("known-issues", "--release", "0." + "9" * 5000)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not a version" in r.stderr, r.stderr[-500:]


def test_missing_data_is_a_usage_error(tmp_path: Path) -> None:
    r = _cli("list", env={ki.ENV_DATA: str(tmp_path / "absent.json")})
    assert r.returncode == 2 and "not found" in r.stderr


# --- anything a log line or a client can put in: a KnownIssuesError or an answer, never another exception ---------

_TEXT = st.one_of(
    st.text(max_size=300),
    st.sampled_from(
        [
            "0.10.2",
            "0.10.2rc1",
            "0.11.0.dev5+g1.rocm700",
            "0." + "9" * 5000,
            "TRITON_ATTN_VLLM_V1",
            "gfx942:xnack-",
            "Using Triton Attention backend.",
            "FULL",
            "fp8",
            "1" * 4400,
            "\x00",
            "7.2.4",
        ]
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    release=st.one_of(st.none(), _TEXT),
    rocm=st.one_of(st.none(), _TEXT),
    arch=st.one_of(st.none(), _TEXT),
    backend=st.one_of(st.none(), _TEXT),
    mode=st.one_of(st.none(), _TEXT),
    architecture=st.one_of(st.none(), _TEXT),
    env=st.one_of(st.none(), st.dictionaries(_TEXT, _TEXT, max_size=4)),
    n=st.one_of(st.none(), st.integers(-10, 10**12), st.text(max_size=5)),
)
def test_fuzzed_configurations_are_judged_or_refused_cleanly(
    release, rocm, arch, backend, mode, architecture, env, n
) -> None:  # noqa: ANN001
    cfg = ki.Config(
        release=release,
        rocm=rocm,
        arch=arch,
        attention_backend=backend,
        mode=mode,
        architecture=architecture,
        env=env,
        max_num_seqs=n,
        tensor_parallel_size=n,
    )
    try:
        DATA.evaluate(cfg)
        DATA.blocking(cfg)
    except ki.KnownIssuesError:
        pass
    try:
        ki.infer_attention_backend(release, arch=arch, env=env, explicit=backend)
    except ki.KnownIssuesError:
        pass
    if release is not None:
        try:
            ki.release_report(DATA, release, {})
            ki.default_mode(release)
        except ki.KnownIssuesError:
            pass
