"""The chart takes a qualification report (`--set-file qualification=report.json`, templates/_qualification.tpl):
the mode comes from it, the sidecar gets the report itself (`--qualification`, from which it takes the canary
baseline and the modes that failed), and a mode it did not pass is refused. Rendered with the real helm, on the real
report of the H200 run (tests/fixtures/qualify/h200-vllm-0.26.0: FULL_DECODE_ONLY recommended, FULL failed).
tests/charts/test_qualification_agreement.py holds the chart's report checks to the Python reader's."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_core.qualification import load
from vllm_rocm_health.canary.baseline import Baseline
from vllm_rocm_stack.config import pinned_versions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helm_chart import CHART, baseline_for, helm, with_reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"
# What the report was measured with: the chart refuses it for another model or release.
# The H200 report's baseline is format 1: no long-prompt answers, so the canary must send none to match it.
MATCH = {
    "vllm.release": "0.26.0",
    "model.name": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "model.servedName": "smollm2-135m-instruct",
    "sidecar.canaryLongPrompts": 0,
}


def helm_template(values: dict[str, Any], report: Path | None) -> subprocess.CompletedProcess[str]:
    args = ["template", "rel", str(CHART), "-n", "llm"]
    if report is None:  # no report: another accuracy reference (the chart refuses to render without one)
        values = with_reference(values)
    for key, val in values.items():
        args += ["--set-json", f"{key}={json.dumps(val)}"]
    if report is not None:
        args += ["--set-file", f"qualification={report}"]
    return helm(*args, check=False)  # helm_chart.helm: an accepted render is recorded (tests/kube applies it)


def render(values: dict[str, Any] | None = None, report: Path | None = REPORT) -> list[dict[str, Any]]:
    proc = helm_template({**MATCH, **(values or {})}, report)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def refused(values: dict[str, Any] | None = None, report: Path | None = REPORT) -> str:
    proc = helm_template({**MATCH, **(values or {})}, report)
    assert proc.returncode != 0, "rendered, but must be refused"
    return proc.stderr


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    dep = next(d for d in docs if d["kind"] == "Deployment")
    return {c["name"]: c for c in dep["spec"]["template"]["spec"]["containers"]}


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def mode_of(docs: list[dict[str, Any]]) -> tuple[str, str]:
    c = containers(docs)
    return (
        json.loads(arg(c["vllm"]["args"], "--compilation-config"))["cudagraph_mode"],
        arg(c["health"]["args"], "--expected-mode"),
    )


def edited(tmp_path: Path, change) -> Path:
    raw = json.loads(REPORT.read_text())
    change(raw)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(raw))
    return path


def test_without_a_report_the_default_mode_is_unchanged() -> None:
    docs = render(report=None)
    assert mode_of(docs) == ("FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE")
    assert "--qualification" not in containers(docs)["health"]["args"]
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-qualification")]


def test_the_mode_comes_from_the_report_and_the_sidecar_gets_the_report(tmp_path: Path) -> None:
    docs = render()
    assert mode_of(docs) == ("FULL_DECODE_ONLY", "FULL_DECODE_ONLY")
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-qualification"))
    text = cm["data"]["qualification.json"]
    assert text == REPORT.read_text()  # the report as given: the sidecar reads it with the Python reader
    c = containers(docs)
    assert arg(c["health"]["args"], "--qualification") == "/etc/vllm-rocm-health/qualification.json"
    assert "--canary-baseline" not in c["health"]["args"]  # the sidecar takes the report's baseline
    # What the sidecar will read from the mounted file: the reader of `qualification apply` takes it, and the
    # baseline in it is one the canary's reader takes, for this model and problem set.
    (tmp_path / "qualification.json").write_text(text)
    report = load(tmp_path / "qualification.json")
    assert report.choose_mode("FULL_DECODE_ONLY") == "FULL_DECODE_ONLY"
    (tmp_path / "baseline.json").write_text(json.dumps(report.baseline))
    base = Baseline.load(tmp_path / "baseline.json")
    base.check_matches("smollm2-135m-instruct", 20251202, 8)
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "canary-reference")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    # A new report rolls the pods: the checksum is over the report they mount.
    assert pod["metadata"]["annotations"]["checksum/canary"] == hashlib.sha256(text.encode()).hexdigest()


def test_a_mode_that_passed_may_be_chosen() -> None:
    assert mode_of(render({"compilation.cudagraphMode": "PIECEWISE"})) == ("PIECEWISE", "PIECEWISE")


def test_the_mode_the_report_failed_is_refused() -> None:
    err = refused({"compilation.cudagraphMode": "FULL"})
    assert "cudagraph_mode FULL failed qualification on this node: first: 1/1 answers differ" in err
    assert "recommended: FULL_DECODE_ONLY" in err


def test_a_mode_the_report_did_not_cover_is_refused(tmp_path: Path) -> None:
    report = edited(tmp_path, lambda r: r.update(rows=[x for x in r["rows"] if x["mode"] != "FULL_AND_PIECEWISE"]))
    assert "FULL_AND_PIECEWISE was not qualified" in refused(
        {"compilation.cudagraphMode": "FULL_AND_PIECEWISE"}, report
    )


def test_eager_needs_none_to_have_passed(tmp_path: Path) -> None:
    docs = render({"enforceEager": True})
    assert "--enforce-eager" in containers(docs)["vllm"]["args"] and mode_of(docs)[1] == "NONE"
    none_failed = edited(tmp_path, lambda r: r["rows"][0].update(verdict="error", verdict_reason="did not start"))
    assert "cudagraph_mode NONE errored qualification on this node: did not start" in refused(
        {"enforceEager": True}, none_failed
    )


@pytest.mark.parametrize(
    "values,message",
    [
        (
            {"model.servedName": "llama"},
            'the report qualified model "smollm2-135m-instruct", this release serves "llama"',
        ),
        ({"vllm.release": "0.14.0"}, "measured on vLLM 0.26.0, vllm.release is 0.14.0"),
        ({"canary.baseline": baseline_for("smollm2-135m-instruct")}, "give the canary's accuracy reference once"),
        ({"canary.existingConfigMap": "mine"}, "give the canary's accuracy reference once"),
        ({"canary.enabled": False}, "canary.enabled=false together with qualification"),
    ],
)
def test_a_report_for_something_else_is_refused(values: dict[str, Any], message: str) -> None:
    assert message in refused(values)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda r: r.update(kind="bench"), "not a qualification report"),
        (lambda r: r.update(rows="none"), "has no rows"),
        (lambda r: r["rows"][1].update(verdict="fine"), "row 1 needs a mode"),
        (lambda r: r["rows"].append(dict(r["rows"][4], verdict="pass")), "mode FULL appears twice"),
        (lambda r: r.pop("vllm_version"), "does not say which vLLM it measured"),
        (lambda r: r.update(baseline=None), "carries no canary baseline"),
        (lambda r: (r.update(recommended=None), [x.update(verdict="fail") for x in r["rows"]]), "recommends no mode"),
    ],
)
def test_malformed_reports_are_refused(tmp_path: Path, change, message: str) -> None:
    assert message in refused(report=edited(tmp_path, change))


def test_not_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text("mode: FULL\n")
    assert "not JSON" in refused(report=tmp_path / "r.json")


def test_qualified_render_is_valid_kubernetes(tmp_path: Path) -> None:
    tool = Path(sys.executable).parent / "kubernetes-validate"
    tool_path = str(tool) if tool.exists() else shutil.which("kubernetes-validate")
    if not tool_path:
        pytest.fail("kubernetes-validate not found (run `make setup`)")
    docs = [d for d in render() if "monitoring.coreos.com" not in d["apiVersion"]]
    (tmp_path / "o.yaml").write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run(
        [tool_path, "-k", pinned_versions()["KUBE_VERSION"], "--strict", "--quiet", str(tmp_path / "o.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
