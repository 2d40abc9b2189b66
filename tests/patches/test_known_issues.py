"""known-issues/known-issues.json and its evaluator: the data is well-formed and verified where it says so, every
row triggers on its own conditions and on nothing else, refusal semantics, and the README table is in step."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from vllm_rocm_patches import known_issues as ki
from vllm_rocm_patches import series

from tests.support.vllm_releases import REPO_ROOT, SUPPORTED_VERSIONS

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
        lambda i: i.pop("verified"),
        lambda i: i.update(symptom="garbage"),
        lambda i: i["affects"].update(modes=["FULLISH"]),
        lambda i: i["affects"].update(vllm="0.10.2"),  # a version, not a specifier
        lambda i: i.update(checks=["only one check"]),  # a verified row needs at least two
        lambda i: i["affects"].update(colour="blue"),
    ):
        bad = copy.deepcopy(RAW)
        mutate(bad["issues"][0])
        assert not validator.is_valid(bad)


def test_at_least_ten_verified_rows_each_with_evidence() -> None:
    verified = [i for i in DATA.issues if i.verified]
    assert len(verified) >= 10
    for i in verified:
        assert len(i.raw["checks"]) >= 2 and i.raw["evidence"], i.id
        # a verified row names a released file it was checked against, and a thread
        assert any("vLLM 0." in c for c in i.raw["checks"]) and any("thread" in c for c in i.raw["checks"]), i.id


def test_patches_named_by_rows_exist_and_every_patch_fixes_a_row() -> None:
    named = {(rel, name) for i in DATA.issues for rel, name in i.patches.items()}
    in_series = {(rs.release, e.patch_name) for rs in SSET.releases.values() for e in rs.entries if e.patch_name}
    assert named <= in_series, named - in_series
    assert in_series <= named, f"patches that fix no known issue: {in_series - named}"
    for rel, _ in named:
        assert rel in SUPPORTED_VERSIONS


@pytest.mark.parametrize("issue_id", IDS)
def test_each_row_triggers_on_its_example_and_each_condition_matters(issue_id: str) -> None:
    issue = DATA.get(issue_id)
    cfg = ki.example_config(issue)
    m = DATA.match(issue, cfg)
    assert m.status == ki.APPLIES and m.unknown == [] and m.failed == [], m
    a = issue.affects
    # every condition the row sets: an unknown value makes it possible, a contradicting value makes it not apply
    for cond in ki.CONDITIONS:
        if cond not in ("vllm", "modes") and not a.get(cond):
            continue
        field = {"vllm": "release", "archs": "arch", "attention_backends": "attention_backend", "switches": "env",
                 "kv_cache_dtypes": "kv_cache_dtype", "quantizations": "quantization",
                 "speculative_methods": "speculative_method", "modes": "mode"}.get(cond, cond)
        assert DATA.match(issue, dataclasses.replace(cfg, **{field: None})).status == ki.POSSIBLE, cond
        other = _contradicting(issue, cond, cfg)
        if other is not None:
            assert DATA.match(issue, dataclasses.replace(cfg, **{field: other})).status == ki.NO, (cond, other)


def _contradicting(issue: ki.Issue, cond: str, cfg: ki.Config):  # noqa: ANN202 - value of the Config field
    a = issue.affects
    if cond == "vllm":
        return next((v for v in ("0.1.0", "99.0.0") if not issue.vllm.contains(v)), None)
    if cond == "rocm":
        return next((v for v in ("5.7.0", "99.0.0") if not issue.rocm.contains(v)), None)
    if cond == "modes":
        return next((m for m in ki.MODES if m not in a["modes"]), None)
    if cond == "switches":
        return {k: "0" if v else "1" for k, v in a["switches"].items()}
    if cond in ("tensor_parallel_size", "max_num_seqs"):
        r = ki.Range.of(a[cond])
        return next(n for n in range(1, 1000) if not r.contains(n))
    return "something-else"


def test_switches_take_vllms_defaults_and_parsing() -> None:
    assert DATA.switch("VLLM_ROCM_USE_AITER", {}) is False
    assert DATA.switch("VLLM_ROCM_USE_AITER_MHA", {}) is True  # envs.py default "True"
    assert DATA.switch("VLLM_ROCM_USE_AITER", {"VLLM_ROCM_USE_AITER": "TRUE"}) is True
    assert DATA.switch("VLLM_ROCM_USE_AITER", {"VLLM_ROCM_USE_AITER": "yes"}) is False  # vLLM: "true"/"1" only


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
    assert DATA.blocking(dataclasses.replace(cfg, release="0.10.2+rocm700"))  # AMD's local label: same release
    assert DATA.blocking(dataclasses.replace(cfg, mode=None)) == []  # unknown: possible, never a refusal
    # unverified rows and slow / oom rows never block, even when they apply
    for i in DATA.issues:
        if not i.verified or i.symptom not in ki.BLOCKING_SYMPTOMS:
            c = ki.example_config(i)
            assert i.id not in {m.issue.id for m in DATA.blocking(c)}, i.id


def test_a_bad_release_is_an_error_not_a_guess() -> None:
    with pytest.raises(ki.KnownIssuesError, match="not a PEP 440 version"):
        DATA.evaluate(ki.Config(release="latest"))


def test_release_report_for_the_supported_releases() -> None:
    by_release = {r: {row["id"]: row["state"] for row in ki.release_report(DATA, r, {})} for r in SUPPORTED_VERSIONS}
    assert by_release["0.10.2"]["aiter-fa-full-cudagraph-always"] == "fixed-by-series"
    assert by_release["0.10.2"]["aiter-fa-cudagraph-dead-flag"] == "not-affected"
    assert by_release["0.10.1.1"]["aiter-fa-cudagraph-dead-flag"] == "fixed-by-series"
    assert by_release["0.11.0"]["aiter-fa-full-cudagraph-always"] == "fixed-upstream"
    assert by_release["0.33.0"]["triton-attn-rocm-full-capture-fault"] == "unmitigated"
    assert by_release["0.33.0"]["mrv2-capture-stream-aiter-splitk"] == "fixed-upstream"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["issues"][0]["affects"].pop("vllm"), "affects.vllm and affects.modes are required"),
        (lambda d: d["issues"][0].update(symptom="meh"), "symptom must be one of"),
        (lambda d: d["issues"][0].update(checks=[]), "must say what was checked"),
        (lambda d: d["issues"][0]["affects"].update(vllm=">=0.10.x"), "PEP 440"),
        (lambda d: d["issues"][0]["affects"].update(switches={"VLLM_ROCM_NEW": True}), "no entry in switch_defaults"),
        (lambda d: d["issues"][1].update(id=d["issues"][0]["id"]), "repeated"),
        (lambda d: d.update(schema_version=2), "schema_version"),
    ],
)
def test_loader_refuses_malformed_data(mutate, message: str, tmp_path: Path) -> None:
    bad = copy.deepcopy(RAW)
    mutate(bad)
    path = tmp_path / "ki.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ki.KnownIssuesError, match=message):
        ki.load(path)


def test_readme_table_is_generated_from_the_data() -> None:
    text = (DIR / "README.md").read_text()
    assert ki.replace_readme_block(text, ki.markdown_table(DATA)) == text, (
        "known-issues/README.md is stale: run `vllm-rocm-patches known-issues --write-readme known-issues/README.md`"
    )
    for issue_id in IDS:
        assert f"[`{issue_id}`]" in text
    assert "known-issues/README.md" in (REPO_ROOT / "README.md").read_text()  # linked from the top-level README


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_rocm_patches", *args], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(REPO_ROOT / "patches" / "src"), **(env or {})})


def test_cli_judges_a_configuration() -> None:
    r = _cli("known-issues", "--release", "0.10.2", "--backend", "ROCM_AITER_FA", "--mode", "FULL", "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["blocking"] == ["aiter-fa-full-cudagraph-always"]
    r = _cli("known-issues", "--release", "0.10.2", "--backend", "ROCM_AITER_FA", "--mode", "FULL",
             "--patch", "vllm-0.10.2/0001-rocm-aiter-fa-uniform-single-token-decode.patch")
    assert r.returncode == 0 and "mitigated by vllm-0.10.2/0001" in r.stdout, r.stdout
    r = _cli("known-issues", "--release", "0.10.2", "--env", "BROKEN")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr
    assert _cli("known-issues").returncode == 0


def test_missing_data_is_a_usage_error(tmp_path: Path) -> None:
    r = _cli("list", env={ki.ENV_DATA: str(tmp_path / "absent.json")})
    assert r.returncode == 2 and "not found" in r.stderr
