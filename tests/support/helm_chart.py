"""Render the chart with the real helm (.work/bin/helm) and pick objects out of the result (shared by the tests).

The chart refuses to render without an accuracy reference for the canary (README "Accuracy gate"), so `render` and
its relatives give every render that names none a real canary baseline for its served model (`with_reference`);
`reference=False` renders exactly the values given (the gate's own tests)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_known_issues import evaluator as ki
from vllm_rocm_stack.config import WORK

from tests.support.render_cache import RenderCache

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
    key, no qualification.* key)."""
    values = dict(values or {})
    if any(k in ("canary", "qualification") or k.startswith(("canary.", "qualification.")) for k in values):
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


# Renders by everything they depend on (tests/support/render_cache.py): on disk across sessions, xdist workers and
# runs, and in memory for the renders this process asked for already (the catalogue's, tests/support/chart_values.py,
# asked by several modules). The checkout's chart does not change during a session: it is read once.
_CACHE = RenderCache(WORK / "cache" / "helm-renders", Path(HELM), stable_chart=CHART)
_RENDERS: dict[Path, subprocess.CompletedProcess[str]] = {}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not Path(HELM).exists():
        pytest.fail(f"helm not found at {HELM} (run `make setup`)")
    entry = _CACHE.entry(args)
    proc = None if entry is None else (_RENDERS.get(entry) or _CACHE.get(entry, args))
    if proc is None:
        proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60)
        if entry is not None:
            _CACHE.put(entry, proc)
    if entry is not None:
        _RENDERS[entry] = proc
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def set_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, val in values.items():
        out += ["--set-json", f"{key}={json.dumps(val)}"]
    return out


def render(values: dict[str, Any] | None = None, caps: bool = True, reference: bool = True) -> list[dict[str, Any]]:
    given = with_reference(values) if reference else (values or {})
    proc = helm("template", "rel", str(CHART), "-n", "llm", *(CAPS if caps else []), *set_args(given))
    return parse(proc.stdout)


def parse(manifest: str) -> list[dict[str, Any]]:
    """The objects of a manifest (libyaml's loader where it is built: a render is ~100 kB, parsed for each caller)."""
    return [d for d in yaml.load_all(manifest, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]


def templates(values: dict[str, Any] | None = None) -> set[str]:
    """The chart's template files that rendered an object for these values (helm's `# Source:` lines)."""
    given = with_reference(values)
    proc = helm("template", "rel", str(CHART), "-n", "llm", *CAPS, *set_args(given))
    return set(re.findall(r"^# Source: vllm-rocm/(\S+)$", proc.stdout, flags=re.M))


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
