"""Render the chart with the real helm (.work/bin/helm) and pick objects out of the result (shared by the tests)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vllm-rocm"
HELM = os.environ.get("HELM", str(ROOT / ".work" / "bin" / "helm"))
CAPS = ["--kube-version", "1.31.4", "--api-versions", "monitoring.coreos.com/v1",
        "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"]
MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not Path(HELM).exists():
        pytest.fail(f"helm not found at {HELM} (run `make setup`)")
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def set_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, val in values.items():
        out += ["--set-json", f"{key}={json.dumps(val)}"]
    return out


def render(values: dict[str, Any] | None = None, caps: bool = True) -> list[dict[str, Any]]:
    proc = helm("template", "rel", str(CHART), "-n", "llm", *(CAPS if caps else []), *set_args(values or {}))
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def render_error(values: dict[str, Any]) -> str:
    proc = helm("template", "rel", str(CHART), "-n", "llm", *CAPS, *set_args(values), check=False)
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


def notes(values: dict[str, Any] | None = None) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it (no cluster needed)."""
    proc = helm("install", "rel", str(CHART), "-n", "llm", "--dry-run=client", *set_args(values or {}))
    assert "NOTES:" in proc.stdout, proc.stdout[-2000:]
    return proc.stdout.split("NOTES:", 1)[1]
