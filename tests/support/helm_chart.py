"""Render the chart with the real helm (.work/bin/helm) and pick objects out of the result (shared by the tests).

The chart refuses to render without an accuracy reference for the canary (README "Accuracy gate"), so `render` and
its relatives give every render that names none a real canary baseline for its served model (`with_reference`);
`reference=False` renders exactly the values given (the gate's own tests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_known_issues import evaluator as ki
from vllm_rocm_stack.config import WORK

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vllm-rocm"
HELM = os.environ.get("HELM", str(WORK / "bin" / "helm"))
CAPS = [
    "--kube-version",
    "1.31.4",
    "--api-versions",
    "monitoring.coreos.com/v1",
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
]
MODES = list(ki.MODES)
# The canary baseline the H200 qualification run recorded (tests/fixtures/qualify), and the chart's default model.
REPORT = ROOT / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# sidecar.canarySeed / canaryNumProblems / canaryLongPrompts, the sidecar's defaults
DEFAULT_SEED, DEFAULT_PROBLEMS, DEFAULT_LONG = 20251202, 8, 2


def baseline_for(
    served: str, seed: int = DEFAULT_SEED, num_problems: int = DEFAULT_PROBLEMS, long_prompts: int = DEFAULT_LONG
) -> str:
    """A canary baseline the sidecar's reader accepts, for the served model name and the canary's problem set: the
    one recorded on the H200 for the default problem set (the model name is what the sidecar compares it by), a
    self-consistent one (right answers) for another. The H200 run recorded format 1 (no long-prompt answers), so
    the right answers of the long prompts are added for a canary that sends them: the chart compares counts only."""
    from vllm_rocm_health.canary import fingerprint, problems

    if (seed, num_problems) == (DEFAULT_SEED, DEFAULT_PROBLEMS):
        base = json.loads(REPORT.read_text())["baseline"]
    else:
        todo = problems.generate(seed, num_problems)
        base = {
            "model": served,
            "seed": seed,
            "num_problems": num_problems,
            "max_tokens": 8,
            "answers": [p.answer for p in todo],
            "score": 1.0,
            "fingerprints": [[None, -1.0, -2.0] for _ in fingerprint.REFERENCE_TEXTS],
        }
    longs = [p.answer for p in problems.long_problems(seed, long_prompts)]
    return json.dumps({**base, "model": served, "format": 2, "long_prompts": long_prompts, "long_answers": longs})


def with_reference(values: dict[str, Any] | None) -> dict[str, Any]:
    """`values`, plus a canary baseline for their served model when they name no accuracy reference (no canary.*
    key, no qualification report)."""
    values = dict(values or {})
    if any(k in ("canary", "qualification") or k.startswith("canary.") for k in values):
        return values
    from vllm_rocm_health.canary.config import CanaryConfig
    from vllm_rocm_health.canary.runner import budget

    served = values.get("model.servedName") or values.get("model.name") or DEFAULT_MODEL
    seed = int(values.get("sidecar.canarySeed", DEFAULT_SEED))
    num = int(values.get("sidecar.canaryNumProblems", DEFAULT_PROBLEMS))
    cfg = CanaryConfig(
        num_problems=num,
        max_requests=int(values.get("sidecar.canaryMaxRequests", 16)),
        long_prompts=int(values.get("sidecar.canaryLongPrompts", DEFAULT_LONG)),
    )
    return {"canary.baseline": baseline_for(served, seed, num, budget(cfg)[1]), **values}


# Every render of the real chart that helm accepted in this test process: manifest text -> the first test that
# rendered it. tests/kube applies each one to a real API server (server-side dry run), so "every value set the chart
# tests render" is what they rendered, not a second list to keep in step. VLLM_ROCM_RENDER_LOG (a directory) also
# writes each one there, for a test process that did not run the chart tests itself (tests/support/renders.py).
RENDERED: dict[str, str] = {}
RENDER_LOG = "VLLM_ROCM_RENDER_LOG"


def record(args: list[str] | tuple[str, ...], stdout: str) -> None:
    """Keep a successful `helm template` / `helm install --dry-run` of the real chart (not a probe copy, not one
    template picked out with --show-only): its manifests and hooks, as the cluster would receive them."""
    if len(args) < 3 or args[0] not in ("template", "install") or args[2] != str(CHART) or "--show-only" in args:
        return
    if args[0] == "install":  # NAME/STATUS/..., HOOKS:, MANIFEST:, NOTES: -> the hooks and the manifest
        if "HOOKS:" not in stdout and "MANIFEST:" not in stdout:
            return
        body = stdout.split("NOTES:", 1)[0]
        start = min(i for i in (body.find("HOOKS:"), body.find("MANIFEST:")) if i >= 0)
        stdout = "\n".join(line for line in body[start:].splitlines() if line not in ("HOOKS:", "MANIFEST:"))
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    if stdout not in RENDERED:
        RENDERED[stdout] = test
        log = os.environ.get(RENDER_LOG)
        if log:
            import hashlib

            name = hashlib.sha256(stdout.encode()).hexdigest()[:16]
            (Path(log) / f"{name}.json").write_text(json.dumps({"test": test, "manifest": stdout}))


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not Path(HELM).exists():
        pytest.fail(f"helm not found at {HELM} (run `make setup`)")
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    if proc.returncode == 0:
        record(args, proc.stdout)
    return proc


def set_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, val in values.items():
        out += ["--set-json", f"{key}={json.dumps(val)}"]
    return out


def render(values: dict[str, Any] | None = None, caps: bool = True, reference: bool = True) -> list[dict[str, Any]]:
    given = with_reference(values) if reference else (values or {})
    proc = helm("template", "rel", str(CHART), "-n", "llm", *(CAPS if caps else []), *set_args(given))
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def render_error(values: dict[str, Any], reference: bool = True) -> str:
    given = with_reference(values) if reference else values
    proc = helm("template", "rel", str(CHART), "-n", "llm", *CAPS, *set_args(given), check=False)
    assert proc.returncode != 0, f"expected helm to reject {values}"
    return proc.stderr


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return kinds(docs)["Deployment"][0]["spec"]["template"]["spec"]


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in spec["containers"] if c["name"] == name)


def arg_value(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


def effective(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's effective settings (templates/_effective.tpl), as the pod annotation carries them."""
    docs = render(values)
    meta = kinds(docs)["Deployment"][0]["spec"]["template"]["metadata"]
    return json.loads(meta["annotations"]["vllm-rocm/effective-settings"])


def refusals(values: dict[str, Any]) -> list[str]:
    """The guard's refusal lines (`  - <what>: <why>`) for values it must refuse."""
    err = render_error(values)
    assert "the chart refuses these values" in err, err
    return [line[4:] for line in err.splitlines() if line.startswith("  - ")]


def notes(values: dict[str, Any] | None = None, reference: bool = True) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it (no cluster needed)."""
    given = with_reference(values) if reference else (values or {})
    proc = helm("install", "rel", str(CHART), "-n", "llm", "--dry-run=client", *set_args(given))
    assert "NOTES:" in proc.stdout, proc.stdout[-2000:]
    return proc.stdout.split("NOTES:", 1)[1]


# The end of every probe template: the `$out` its body built, as JSON in one ConfigMap.
_PROBE_RESULT = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: probe
data:
  result: {{ toJson $out | quote }}
"""


def probe_chart(dest: Path, body: str) -> Path:
    """A copy of the chart under `dest` with one more template: `body` calls the chart's own helpers on the inputs
    given as `.Values.probe` and collects their answers in `$out` (agreement tests ask many inputs in one render)."""
    chart = dest / "vllm-rocm"
    shutil.copytree(CHART, chart)
    schema = json.loads((chart / "values.schema.json").read_text())
    schema["properties"]["probe"] = {"type": "object"}
    (chart / "values.schema.json").write_text(json.dumps(schema))
    (chart / "templates" / "zz-probe.yaml").write_text(body + _PROBE_RESULT)
    return chart


def render_probe(chart: Path, tmp: Path, inputs: dict[str, Any], check: bool = True) -> Any:
    """The probe's `$out` for these inputs; with check=False the finished helm process instead (its refusals)."""
    (tmp / "probe.yaml").write_text(json.dumps({"probe": inputs}))
    proc = helm(
        "template",
        "rel",
        str(chart),
        "-f",
        str(tmp / "probe.yaml"),
        *set_args(with_reference({})),
        "--show-only",
        "templates/zz-probe.yaml",
        check=check,
    )
    if not check:
        return proc
    return json.loads(yaml.safe_load(proc.stdout)["data"]["result"])
