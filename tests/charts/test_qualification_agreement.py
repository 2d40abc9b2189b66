"""The chart's checks of a qualification report and of a canary baseline agree with the Python readers the sidecar and
compose's gate run: every report or baseline one side refuses, the other refuses too.

Python side, as `vllm-rocm-health qualification apply` and the sidecar read a report: `qualification.load`'s
`validate`, `check_served_model`, `choose_mode`, the baseline's presence, `Baseline.load` of it, and the canary's
`check_matches` (model, seed, problem count). A canary baseline alone: `Baseline.load` + `check_matches`. Chart side:
the same templates the render uses (`vllm-rocm.qualificationProblem`, `vllm-rocm.baselineTextProblem`), called on
every generated input in one render of a copy of the chart with a probe template, plus real renders of a sample.

The inputs are generated: every field of the real H200 report (tests/fixtures/qualify) and of its baseline replaced
by each value of the wrong type or range, deleted, duplicated; then the documented differences are checked to still
be what they are (so that fixing one side fails here until the list is updated):
- CHART_ONLY: rules only the chart has (vllm_version must name vllm.release; Python's reader has no release).
Every check runs against the canary's long-prompt count too (LONG: 0 for most cases, as the H200 baseline recorded
none; the format-2 cases that carry long-prompt answers name their own).
- CHART_BLIND: what a template cannot see: JSON numbers arrive as float64 (an integer written 8.0, a format 1.0),
  and whether the
  score matches the answers needs the seeded problem generator. The sidecar refuses these at start.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm_rocm_core.qualification import QualificationError, validate
from vllm_rocm_health.canary.baseline import Baseline, BaselineError

from tests.support.helm_chart import (
    CHART,
    REPORT,
    baseline_for,
    helm,
    probe_chart,
    render_probe,
    set_args,
)

SERVED, RELEASE, SEED, PROBLEMS, LONG = "smollm2-135m-instruct", "0.26.0", 20251202, 8, 0
# The H200 report's baseline is format 1: no long-prompt answers, so a canary of its own sends none.
MATCH = {
    "vllm.release": RELEASE,
    "model.name": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "model.servedName": SERVED,
    "sidecar.canaryLongPrompts": 0,
}

PROBE = """\
{{- $out := dict "reports" (list) "baselines" (list) -}}
{{- range .Values.probe.reports -}}
{{- $p := include "vllm-rocm.qualificationProblem" (dict "text" .text "mode" .mode "eager" false "served" .served
      "release" .release "seed" .seed "numProblems" .numProblems "longPrompts" .longPrompts) -}}
{{- $_ := set $out "reports" (append $out.reports $p) -}}
{{- end -}}
{{- range .Values.probe.baselines -}}
{{- $p := include "vllm-rocm.baselineTextProblem" (dict "text" .text "model" .model "seed" .seed
      "numProblems" .numProblems "longPrompts" .longPrompts) -}}
{{- $_ := set $out "baselines" (append $out.baselines $p) -}}
{{- end -}}
"""

Mutation = Callable[[dict[str, Any]], Any]
DELETE = object()
WRONG = [None, True, 0, 1.5, -1, "", "x", [], {}, [1], {"a": 1}]


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def change(raw: dict[str, Any]) -> None:
        node = raw
        for key in path[:-1]:
            node = node[key]
        if value is DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = copy.deepcopy(value)

    return change


def _report() -> dict[str, Any]:
    return json.loads(REPORT.read_text())


# --- the inputs -----------------------------------------------------------------------------------------------------


def report_cases() -> list[tuple[str, str, str]]:
    """(name, report text, mode asked for) for every generated report."""
    out: list[tuple[str, str, str]] = [
        ("as recorded", REPORT.read_text(), ""),
        ("as recorded, PIECEWISE", REPORT.read_text(), "PIECEWISE"),
    ]

    def add(name: str, change: Mutation, mode: str = "") -> None:
        raw = _report()
        change(raw)
        out.append((name, json.dumps(raw), mode))

    for key in ("kind", "format", "rows", "recommended", "baseline", "served_model_name", "vllm_version"):
        add(f"{key} deleted", _set((key,), DELETE))
        for v in WRONG:
            add(f"{key}={json.dumps(v)}", _set((key,), v))
    add("format=1.0", _set(("format",), 1.0))
    add("format=2", _set(("format",), 2))
    add('format="1"', _set(("format",), "1"))
    add("kind=bench", _set(("kind",), "bench"))
    add("rows empty", _set(("rows",), []))
    for i in (0, 2, 4):
        add(f"row {i} not an object", _set(("rows", i), "x"))
        for key in ("mode", "verdict"):
            add(f"row {i} {key} deleted", _set(("rows", i, key), DELETE))
            for v in [*WRONG, "full", "PASS", "FULLY", ["FULL"]]:
                add(f"row {i} {key}={json.dumps(v)}", _set(("rows", i, key), v))
    add("FULL twice, the second passing", lambda r: r["rows"].append(dict(r["rows"][4], verdict="pass")), "FULL")
    add("NONE twice, the same", lambda r: r["rows"].append(dict(r["rows"][0])))
    add("the recommended mode twice", lambda r: r["rows"].insert(0, dict(r["rows"][2])))
    for rec in ("FULL", "FULLY", "NONE", ["FULL_DECODE_ONLY"], {"FULL_DECODE_ONLY": 1}):
        add(f"recommended={json.dumps(rec)}", _set(("recommended",), rec))
    add(
        "nothing passed, nothing recommended",
        lambda r: (r.update(recommended=None), [x.update(verdict="fail") for x in r["rows"]]),
    )
    add("the FULL row asked for", lambda r: None, "FULL")
    add(
        "a mode the report did not cover",
        lambda r: r.update(rows=[x for x in r["rows"] if x["mode"] != "PIECEWISE"]),
        "PIECEWISE",
    )
    add("NONE errored", lambda r: r["rows"][0].update(verdict="error", verdict_reason="did not start"), "NONE")
    # gpu_product: optional, but when present a product name (deleted is the recorded report: valid).
    for v in [*WRONG, "  "]:
        add(f"gpu_product={json.dumps(v)}", _set(("gpu_product",), v))
    add("gpu_product named", _set(("gpu_product",), "AMD_Instinct_MI300X_OAM"))
    add("served_model_name other", _set(("served_model_name",), "llama"))
    add("vllm_version other", _set(("vllm_version",), "0.14.0"))
    add("vllm_version dev build", _set(("vllm_version",), "0.26.0.dev1"))
    for name, change in baseline_mutations():
        add(f"baseline {name}", lambda r, c=change: c(r["baseline"]))
    for text in ("mode: FULL\n", "[]", "null", "1", '"x"', "", '{"kind": "vllm-rocm-qualification", "x": NaN}'):
        out.append((f"text {text!r}", text, ""))
    return out


def baseline_mutations() -> list[tuple[str, Mutation]]:
    out: list[tuple[str, Mutation]] = [("as recorded", lambda b: None)]
    fields = (
        "model",
        "seed",
        "num_problems",
        "max_tokens",
        "answers",
        "score",
        "fingerprints",
        "created",
        "server_version",
        "notes",
        "format",
    )
    for key in fields:
        out.append((f"{key} deleted", _set((key,), DELETE)))
        for v in WRONG:
            out.append((f"{key}={json.dumps(v)}", _set((key,), v)))
    out += [
        ("unknown field", _set(("extra",), 1)),
        ("format=1.0", _set(("format",), 1.0)),
        ("format=2", _set(("format",), 2)),
        ("model other", _set(("model",), "llama")),
        ("seed other", _set(("seed",), 12345)),
        ("seed=20251202.0", _set(("seed",), 20251202.0)),
        ("num_problems=7", _set(("num_problems",), 7)),
        ("num_problems=8.0", _set(("num_problems",), 8.0)),
        ("max_tokens=8.0", _set(("max_tokens",), 8.0)),
        ("answers too short", lambda b: b["answers"].pop()),
        ("an answer null", _set(("answers", 0), None)),
        ("an answer 7.0", _set(("answers", 0), 7.0)),
        ("an answer 7.5", _set(("answers", 0), 7.5)),
        ('an answer "7"', _set(("answers", 0), "7")),
        ("an answer true", _set(("answers", 0), True)),
        ("score 1.1", _set(("score",), 1.1)),
        ("score 0.5 (does not match the answers)", _set(("score",), 0.5)),
        ("score 0.75 as 0.750", _set(("score",), 0.750)),
        ("two fingerprint lists", lambda b: b["fingerprints"].pop()),
        ("four fingerprint lists", lambda b: b["fingerprints"].append([None, -1.0])),
        ("a fingerprint not a list", _set(("fingerprints", 1), "x")),
        ("a fingerprint of one entry", _set(("fingerprints", 1), [None])),
        ("a fingerprint starting with a number", _set(("fingerprints", 1, 0), -3.5)),
        ('a fingerprint starting with "x"', _set(("fingerprints", 1, 0), "x")),
        ("a fingerprint with a null inside", _set(("fingerprints", 1, 3), None)),
        ('a fingerprint with "x" inside', _set(("fingerprints", 1, 3), "x")),
        ("created 1.0", _set(("created",), 1.0)),
        ("format 1 with long_prompts", _set(("long_prompts",), 0)),
        ("format 2, long_prompts 0", _long(0, [])),
        ("format 2, long_prompts 2, no answers", _long(2, [])),
        ("format 2, long_prompts 2, two answers", _long(2, [5, None])),
        ("format 2, long_prompts 2, one answer 1.5", _long(2, [5, 1.5])),
        ('format 2, long_prompts "2"', _long("2", [5, 6])),
        ("format 2, long_prompts -1", _long(-1, [])),
        ("format 2, long_answers a map", _long(1, {"a": 1})),
        ("format 2, long_prompts deleted", lambda b: (_long(0, [])(b), b.pop("long_prompts"))),
    ]
    return out


def _long(count: Any, answers: Any) -> Mutation:
    def change(b: dict[str, Any]) -> None:
        b.update(format=2, long_prompts=count, long_answers=answers)

    return change


# The cases a canary with two long prompts per run checks (both sides then compare against 2, not LONG).
LONG_TWO = {"format 2, long_prompts 2, two answers"}


def long_prompts_of(name: str) -> int:
    return 2 if name in LONG_TWO else LONG


def baseline_cases() -> list[tuple[str, str]]:
    """(name, baseline file text) for canary.baseline."""
    base = json.loads(REPORT.read_text())["baseline"]
    out = []
    for name, change in baseline_mutations():
        raw = copy.deepcopy(base)
        change(raw)
        out.append((name, json.dumps(raw)))
    out += [(f"text {t!r}", t) for t in ("model: x\n", "[]", "null", "1", "", '{"format": 1, "score": NaN}')]
    return out


# --- the documented differences --------------------------------------------------------------------------------------

# Both readers require a vllm_version string; only the chart knows which release it must name.
CHART_ONLY = {"vllm_version other", "vllm_version dev build", 'vllm_version="x"'}
CHART_BLIND = {
    "format=1.0",
    "seed=20251202.0",
    "num_problems=8.0",
    "max_tokens=8.0",
    "an answer 7.0",
    "an answer null",
    "score 0.5 (does not match the answers)",
    "score=0",
}


# --- the two readers --------------------------------------------------------------------------------------------------


def python_report(text: str, mode: str, tmp: Path) -> str:
    """ "accepted", "refused" or "crash: <exception>", as `qualification apply` and the sidecar would end."""
    try:
        report = validate(json.loads(text), "report")
        report.check_served_model(SERVED)
        report.choose_mode(mode)
        if report.baseline is None:
            raise QualificationError("no baseline")
        return python_baseline(json.dumps(report.baseline), tmp)
    except (QualificationError, ValueError):
        return "refused"
    except Exception as e:  # noqa: BLE001 - what the reader should have turned into a reason
        return f"crash: {type(e).__name__}"


def python_baseline(text: str, tmp: Path, long_prompts: int = LONG) -> str:
    path = tmp / "baseline.json"
    path.write_text(text)
    try:
        Baseline.load(path).check_matches(SERVED, SEED, PROBLEMS, long_prompts)
    except BaselineError:
        return "refused"
    except Exception as e:  # noqa: BLE001
        return f"crash: {type(e).__name__}"
    return "accepted"


@pytest.fixture(scope="module")
def chart_verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The chart's problem text for every generated report and baseline ("" = accepted), in one render."""
    tmp = tmp_path_factory.mktemp("agreement")
    chart = probe_chart(tmp, PROBE)
    common = {"served": SERVED, "release": RELEASE, "seed": SEED, "numProblems": PROBLEMS, "longPrompts": LONG}
    reports, baselines = report_cases(), baseline_cases()
    result = render_probe(
        chart,
        tmp,
        {
            "reports": [{"text": t, "mode": m, **common} for _, t, m in reports],
            "baselines": [
                {"text": t, "model": SERVED, "seed": SEED, "numProblems": PROBLEMS, "longPrompts": long_prompts_of(n)}
                for n, t in baselines
            ],
        },
    )
    assert len(result["reports"]) == len(reports) and len(result["baselines"]) == len(baselines)
    return {
        "reports": {f"{n}|{m}": p for (n, _, m), p in zip(reports, result["reports"], strict=True)},
        "baselines": {n: p for (n, _), p in zip(baselines, result["baselines"], strict=True)},
    }


def _agrees(key: str, chart_problem: str, python: str) -> bool:
    """Whether the two verdicts on one input are what they must be (equal, or the documented difference)."""
    chart_refuses = chart_problem != ""
    if key in CHART_ONLY:
        return chart_refuses and python == "accepted"
    if key.removeprefix("baseline ") in CHART_BLIND:
        return not chart_refuses and python == "refused"
    return chart_refuses == (python != "accepted") and not python.startswith("crash")


def test_report_checks_agree_with_the_python_reader(chart_verdicts: dict[str, dict[str, str]], tmp_path: Path) -> None:
    cases = report_cases()
    assert len({(n, m) for n, _, m in cases}) == len(cases), "two generated reports share a name"
    wrong, refused = [], 0
    for name, text, mode in cases:
        problem = chart_verdicts["reports"][f"{name}|{mode}"]
        py = python_report(text, mode, tmp_path)
        refused += problem != ""
        if not _agrees(name, problem, py):
            wrong.append(f"{name} (mode {mode or 'recommended'}): chart {problem or 'accepts'!r}; python {py}")
    assert not wrong, "the chart and the Python reader disagree:\n" + "\n".join(wrong)
    assert refused > 200 and len(cases) - refused >= 5, (refused, len(cases))  # both outcomes are reached
    names = {n for n, _, _ in cases}
    # Cases the Python reader once accepted (`format: true` equals 1) or crashed on (an unhashable `recommended`):
    # generated still, and now refused with a reason on both sides.
    for name in CHART_ONLY | {"format=true", "baseline format=true", 'recommended=["FULL_DECODE_ONLY"]'}:
        assert name in names, f"documented difference {name!r} is no generated case"


def test_baseline_checks_agree_with_the_sidecars_reader(
    chart_verdicts: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    cases = baseline_cases()
    assert len({n for n, _ in cases}) == len(cases), "two generated baselines share a name"
    wrong = []
    for name, text in cases:
        problem = chart_verdicts["baselines"][name]
        py = python_baseline(text, tmp_path, long_prompts_of(name))
        if not _agrees(f"baseline {name}", problem, py):
            wrong.append(f"{name}: chart {problem or 'accepts'!r}; sidecar {py}")
    assert not wrong, "the chart and the sidecar's baseline reader disagree:\n" + "\n".join(wrong)
    assert sum(1 for p in chart_verdicts["baselines"].values() if p) > 100
    assert set(CHART_BLIND) <= {n for n, _ in cases}


def test_the_render_itself_applies_the_same_checks(tmp_path: Path) -> None:
    """The probe calls the templates the render calls: a sample through the real chart, with --set-file, refuses
    and accepts the same (the message names the same problem)."""
    sample = {
        "as recorded",
        "rows=[]",
        "FULL twice, the second passing",
        "vllm_version deleted",
        "baseline seed other",
        "baseline fingerprints deleted",
        'recommended=["FULL_DECODE_ONLY"]',
    }
    cases = {n: (t, m) for n, t, m in report_cases() if n in sample}
    assert set(cases) == sample
    for name, (text, mode) in cases.items():
        path = tmp_path / "report.json"
        path.write_text(text)
        values = {**MATCH, **({"compilation.cudagraphMode": mode} if mode else {})}
        proc = helm(
            "template",
            "rel",
            str(CHART),
            "-n",
            "llm",
            *set_args(values),
            "--set-file",
            f"qualification={path}",
            check=False,
        )
        if name == "as recorded":
            assert proc.returncode == 0, proc.stderr
        else:
            assert proc.returncode != 0 and "qualification: " in proc.stderr, (name, proc.stderr[-500:])
    for name, text in baseline_cases():
        if name not in ("as recorded", "seed other", "fingerprints deleted"):
            continue
        path = tmp_path / "baseline.json"
        path.write_text(text)
        proc = helm(
            "template",
            "rel",
            str(CHART),
            "-n",
            "llm",
            *set_args(MATCH),
            "--set-file",
            f"canary.baseline={path}",
            check=False,
        )
        assert (proc.returncode == 0) == (name == "as recorded"), (name, proc.stderr[-500:])
        if name != "as recorded":
            assert "canary.baseline: " in proc.stderr, proc.stderr


def test_the_baseline_the_other_tests_render_with_is_one_the_sidecar_takes(tmp_path: Path) -> None:
    for seed, n in ((SEED, PROBLEMS), (0, 1), (7, 30)):
        (tmp_path / "b.json").write_text(baseline_for("m", seed, n))
        Baseline.load(tmp_path / "b.json").check_matches("m", seed, n)
