"""Every row's `vllm` bounds agree with the code of the released wheels: known-issues/code-facts.json (where each of the
data's code_probes matches in every release 0.10.0 .. releases_checked_up_to, written by
`python -m vllm_rocm_stack.known_issues_audit --write`) against each row's `code_condition`. No download here: the facts
file is committed; `known_issues_audit --check` re-derives it from the wheels (the slow test at the end, by hand)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from vllm_rocm_stack import known_issues_audit as audit
from vllm_rocm_stack import vllm_wheels

from tests.support.vllm_releases import REPO_ROOT

DATA = json.loads((REPO_ROOT / audit.DATA).read_text())
FACTS = json.loads((REPO_ROOT / audit.FACTS).read_text())
WITH_CONDITION = [r["id"] for r in DATA["issues"] if r.get("code_condition")]


def _row(data: dict, row_id: str) -> dict:
    return next(r for r in data["issues"] if r["id"] == row_id)


def test_the_facts_file_is_made_from_these_probes_and_covers_every_release() -> None:
    assert audit.consistency(DATA, FACTS) == []
    releases = list(FACTS["releases"])
    assert releases[0] == audit.OLDEST_RELEASE and releases[-1] == DATA["releases_checked_up_to"]
    assert len(releases) >= 40  # 0.10.0 .. 0.34.0 on PyPI: every final release, none skipped
    for entry in FACTS["releases"].values():
        assert entry["wheel"].startswith("vllm-") and len(entry["sha256"]) == 64


def test_most_rows_rest_on_a_code_condition() -> None:
    """The rows whose evidence is a code fact carry it machine-readably (issue 34); the rest are reports, runtime or
    dev-build-only rows (their checks say why)."""
    assert len(WITH_CONDITION) >= 30
    every_probe_matches_somewhere = {
        pid for entry in FACTS["releases"].values() for pid, where in entry["probes"].items() if where
    }
    # a probe that matches in no release proves nothing (a typo in its pattern looks the same)
    never = set(DATA["code_probes"]) - every_probe_matches_somewhere
    assert never == set(), never


@pytest.mark.parametrize("row_id", WITH_CONDITION)
def test_row_bounds_agree_with_the_code(row_id: str) -> None:
    assert audit.disagreements(_row(DATA, row_id), FACTS, DATA) == []


@pytest.mark.parametrize(
    "row_id, wrong_bound, complaint",
    [
        # exact: one release too many (the fix is in 0.11.0) and one too few
        ("aiter-fa-full-cudagraph-always", ">=0.10.2,<0.11.1", "0.11.0: inside"),
        ("rocm-capture-memory-oom", "<0.25.1", "0.25.1: the code condition holds"),
        # the bound the audit of issue 34 found wrong: the fixed one must not pass with the old value
        ("aiter-mxfp4-moe-graph-unsafe", ">=0.22.0", "0.11.1: the code condition holds"),
        ("rocm-attn-full-decode-capture-fault", ">=0.17.0", "0.11.0: the code condition holds"),
        ("hip-graph-replay-stale-scalar-read-gfx950", ">=0.20.0", "0.18.0: the code condition holds"),
        # within: ROCm forces PIECEWISE with DCP up to 0.28
        ("mtp-dcp-full-and-piecewise-corruption", ">=0.22.0", "0.22.0: inside"),
        # covers: the model is in the 0.24.0 registry
        ("minimax-m3-fp8-kv-cache-dtype-mismatch", ">=0.26.0", "0.24.0: the code condition holds"),
        # exact together with another row: narrowing one of the two leaves releases uncovered
        ("aiter-fa-sliding-window-decode-unified-again", ">=0.24.0", "0.23.0: the code condition holds"),
    ],
)
def test_a_wrong_bound_fails(row_id: str, wrong_bound: str, complaint: str) -> None:
    data = copy.deepcopy(DATA)
    _row(data, row_id)["affects"]["vllm"] = wrong_bound
    problems = audit.disagreements(_row(data, row_id), FACTS, data)
    assert any(p.startswith(complaint) for p in problems), problems


def test_stale_or_dangling_probes_fail() -> None:
    data = copy.deepcopy(DATA)
    data["code_probes"]["aiter-fa-declares-always"]["pattern"] += "X"  # a changed definition: the facts are stale
    assert any("other code_probes" in p for p in audit.consistency(data, FACTS))
    data = copy.deepcopy(DATA)
    _row(data, "aiter-fa-full-cudagraph-always")["code_condition"]["present"] = ["no-such-probe"]
    assert any("unknown probes" in p for p in audit.consistency(data, FACTS))
    data = copy.deepcopy(DATA)
    data["code_probes"]["unused-probe"] = {"files": ["vllm/envs.py"], "pattern": "x", "what": "used by no row at all"}
    assert any("used by no row" in p for p in audit.consistency(data, FACTS))
    data = copy.deepcopy(DATA)
    _row(data, "aiter-fa-sliding-window-decode-capture-fault")["code_condition"]["together_with"] = ["nope"]
    assert audit.disagreements(_row(data, "aiter-fa-sliding-window-decode-capture-fault"), FACTS, data) == [
        "together_with names 'nope', which is not a row"
    ]


def test_a_facts_file_that_misses_a_release_fails() -> None:
    facts = copy.deepcopy(FACTS)
    del facts["releases"][DATA["releases_checked_up_to"]]
    assert any("must cover" in p for p in audit.consistency(DATA, facts))


def test_probe_finds_the_first_match_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "vllm" / "a").mkdir(parents=True)
    (tmp_path / "vllm" / "a" / "x.py").write_text("one\nclass B:\n    cudagraph_support = ALWAYS\n")
    (tmp_path / "vllm" / "b.py").write_text("cudagraph_support = ALWAYS\n")
    names = audit.python_files(tmp_path)
    probe = audit.Probe("p", ("vllm/a/*.py",), r"cudagraph_support = (ALWAYS|NEVER)", "a probe for the test")
    assert probe.find(tmp_path, names) == "vllm/a/x.py:3"
    multi = audit.Probe("m", ("vllm/*.py",), r"class B:\n\s+cudagraph", "multi-line")
    assert multi.find(tmp_path, names) == "vllm/a/x.py:2"  # fnmatch's * crosses directories
    assert audit.Probe("n", ("vllm/c.py",), "ALWAYS", "no such file").find(tmp_path, names) is None


def test_the_release_list_is_every_final_release_in_range() -> None:
    available = ["0.9.2", "0.10.0", "0.10.1.1", "0.34.0", "0.35.0", "0.20.0"]
    assert audit.releases_to_check(DATA, available) == ["0.10.0", "0.10.1.1", "0.20.0", "0.34.0"]
    with pytest.raises(audit.AuditError):  # the data names a newest release the index does not have
        audit.releases_to_check(DATA, ["0.10.0", "0.33.0"])


def test_cli_help_and_report_need_no_download(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        audit.main(["--help"])
    assert exit_info.value.code == 0
    assert audit.main(["--report", "--root", str(REPO_ROOT)]) == 0


@pytest.mark.slow
def test_the_committed_facts_are_what_the_cached_wheels_say() -> None:
    """Re-derive the facts of the releases already in the wheel cache (all of them after one
    `known_issues_audit --write`); the full `--check` also asks PyPI for new releases and fetches missing wheels."""
    cached = [v for v in FACTS["releases"] if (vllm_wheels.DEFAULT_CACHE / v / vllm_wheels.MARKER).is_file()]
    if not cached:
        pytest.skip(f"no release in {vllm_wheels.DEFAULT_CACHE}: run `{audit.GENERATED_BY}` once")
    derived = audit.derive(DATA, cached)
    for version in cached:
        assert derived["releases"][version] == FACTS["releases"][version], version
