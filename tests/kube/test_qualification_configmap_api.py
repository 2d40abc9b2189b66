"""`vllm-rocm qualification publish|current` against a real kube-apiserver (tests/support/kube.py): the commands run
as the qualification Job runs them, as subprocesses, here outside a pod, so through the kubeconfig fallback of
direct_http.kubernetes_core_api (KUBECONFIG; a proxy variable in the environment is ignored). What they write is
read back through the API, not through the commands.

The report is the real H200 run (tests/fixtures/qualify/h200-vllm-0.26.0, vLLM 0.26.0, smollm2-135m-instruct,
recommends FULL_DECODE_ONLY) with a `gpu_product` added, as `qualify run --gpu-product` writes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import kube

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0" / "report.json"
NS = "qualification"
MI300X, MI355X = "AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI355X_OAM"
RELEASE, MODEL = "0.26.0", "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def plane(control_plane: kube.ControlPlane) -> kube.ControlPlane:
    control_plane.create_namespace(NS)
    return control_plane


def report(tmp_path: Path, name: str = "report.json", **change: Any) -> Path:
    raw = {**json.loads(H200.read_text()), "gpu_product": MI300X, **change}
    path = tmp_path / name
    path.write_text(json.dumps(raw, indent=1) + "\n")  # not the fixture's bytes: the ConfigMap must hold these
    return path


def cli(plane: kube.ControlPlane, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}  # outside a pod
    env.update(KUBECONFIG=str(kubeconfig or plane.kubeconfig), HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_qualify.command", "qualification", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def wanted(configmap: str, **change: str) -> list[str]:
    values = {
        "--configmap": configmap,
        "--namespace": NS,
        "--vllm-version": RELEASE,
        "--model": MODEL,
        "--gpu-product": MI300X,
        **change,
    }
    return [x for k, v in values.items() for x in (k, v)]


def read(plane: kube.ControlPlane, name: str, ns: str = NS) -> httpx.Response:
    return plane.client.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")


def test_publish_reads_back_is_current_and_replaces(plane: kube.ControlPlane, tmp_path: Path) -> None:
    first = report(tmp_path)
    res = cli(
        plane,
        "publish",
        "--report",
        str(first),
        *wanted("q-main"),
        "--modes",
        "NONE,FULL_DECODE_ONLY",
        "--label",
        "team=ml",
    )
    assert res.returncode == 0, res.stderr
    assert "published: cudagraph_mode FULL_DECODE_ONLY in ConfigMap qualification/q-main" in res.stdout
    assert "created ConfigMap qualification/q-main" in res.stderr
    r = read(plane, "q-main")
    assert r.status_code == 200, r.text
    cm = r.json()
    assert cm["data"] == {"report.json": first.read_text(), "mode": "FULL_DECODE_ONLY"}
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vllm-rocm-qualification", "team": "ml"}
    assert cm["metadata"]["annotations"] == {
        "vllm-rocm/qualified-vllm-version": RELEASE,
        "vllm-rocm/qualified-model": MODEL,
        "vllm-rocm/qualified-gpu-product": MI300X,
        "vllm-rocm/qualified-mode": "FULL_DECODE_ONLY",
    }
    res = cli(plane, "current", *wanted("q-main"), "--modes", "NONE,FULL_DECODE_ONLY")
    assert (res.returncode, res.stdout.strip()) == (0, "current: FULL_DECODE_ONLY"), res.stderr

    # A new run that recommends another mode it passed: the ConfigMap is replaced, not duplicated or refused.
    second = report(tmp_path, "second.json", recommended="PIECEWISE")
    res = cli(plane, "publish", "--report", str(second), *wanted("q-main"))
    assert res.returncode == 0 and "replaced ConfigMap qualification/q-main" in res.stderr, res.stderr
    again = read(plane, "q-main").json()
    assert again["data"] == {"report.json": second.read_text(), "mode": "PIECEWISE"}
    assert again["metadata"]["uid"] == cm["metadata"]["uid"]
    assert again["metadata"]["resourceVersion"] != cm["metadata"]["resourceVersion"]
    assert again["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vllm-rocm-qualification"}
    res = cli(plane, "current", *wanted("q-main"))
    assert (res.returncode, res.stdout.strip()) == (0, "current: PIECEWISE"), res.stderr

    # What changed since: each makes it not current, saying why (a re-qualification is due).
    for change, words in (
        ({"--gpu-product": MI355X}, f"qualified GPU product {MI300X}, this deployment runs on {MI355X}"),
        ({"--vllm-version": "0.26.1"}, "measured on vLLM 0.26.0, vLLM 0.26.1 runs"),
        ({"--model": "meta-llama/Llama-3.1-8B-Instruct"}, "qualify this model"),
        ({"--modes": "NONE,FULL_DECODE_ONLY"}, "recommends cudagraph_mode PIECEWISE, which this deployment does not"),
    ):
        res = cli(plane, "current", *wanted("q-main", **change))
        assert res.returncode == 1 and words in res.stdout and "not current" in res.stdout, (change, res)


def test_a_refused_report_writes_nothing(plane: kube.ControlPlane, tmp_path: Path) -> None:
    other = report(tmp_path, gpu_product=MI355X)
    res = cli(plane, "publish", "--report", str(other), *wanted("q-refused"))
    assert res.returncode == 1 and f"qualified GPU product {MI355X}" in res.stderr, res.stderr
    assert read(plane, "q-refused").status_code == 404
    # Over a published one: it keeps what it held.
    assert cli(plane, "publish", "--report", str(report(tmp_path, "good.json")), *wanted("q-refused")).returncode == 0
    before = read(plane, "q-refused").json()
    res = cli(plane, "publish", "--report", str(other), *wanted("q-refused"))
    assert res.returncode == 1 and "nothing written" in res.stderr, res.stderr
    assert read(plane, "q-refused").json()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_current_is_not_when_absent_or_tampered(plane: kube.ControlPlane, tmp_path: Path) -> None:
    res = cli(plane, "current", *wanted("q-absent"))
    assert res.returncode == 1 and "ConfigMap qualification/q-absent does not exist" in res.stdout, res
    assert cli(plane, "publish", "--report", str(report(tmp_path)), *wanted("q-tampered")).returncode == 0
    cm = read(plane, "q-tampered").json()
    for data, words in (
        ({**cm["data"], "mode": "FULL"}, "mode is 'FULL', the report gives FULL_DECODE_ONLY"),
        ({"mode": "FULL_DECODE_ONLY"}, "report.json: missing"),
        ({**cm["data"], "report.json": "{"}, "report.json: not JSON"),
        ({**cm["data"], "report.json": json.dumps({"kind": "other"})}, "not a qualification report"),
    ):
        put = plane.client.put(
            f"/api/v1/namespaces/{NS}/configmaps/q-tampered",
            json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q-tampered"}, "data": data},
        )
        assert put.status_code == 200, put.text
        res = cli(plane, "current", *wanted("q-tampered"))
        assert res.returncode == 1 and words in res.stdout, (words, res)


def test_api_failures_exit_3_with_the_apis_message(plane: kube.ControlPlane, tmp_path: Path) -> None:
    res = cli(plane, "publish", "--report", str(report(tmp_path)), *wanted("q", **{"--namespace": "no-such-namespace"}))
    assert res.returncode == 3, res.stderr
    assert 'HTTP 404: namespaces "no-such-namespace" not found' in res.stderr, res.stderr
    # A credential the API server does not know: 401, for either command (current never reads it as "absent").
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text(plane.kubeconfig.read_text().replace(plane.token, "unknown" + plane.token))
    for command in (["current"], ["publish", "--report", str(report(tmp_path))]):
        res = cli(plane, *command, *wanted("q-main"), kubeconfig=bad)
        assert res.returncode == 3 and "HTTP 401: Unauthorized" in res.stderr, (command, res)
