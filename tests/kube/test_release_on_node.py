"""The chart's promise on a real node: `helm install` of the chart with the vLLM CPU image and the sidecar image (by
digest, as the README tells users) into the single-node cluster (tests/support/kube_node.py), then what users rely on:

- the pod is Ready, and so in the Service's endpoints, only once the sidecar's canary passed (pod readiness is the
  sidecar's /readyz); `helm test` passes;
- the sidecar reads vLLM's log through the API server with exactly the chart's RBAC: each of its rules is needed and
  a missing one fails visibly;
- a killed vLLM container leaves the endpoints until the canary passes on the new engine;
- `helm upgrade` to a wrong server (the perturbed model, standing in for a wrong cudagraph mode) never becomes Ready:
  the rollout stalls with the old pod serving, requests through the Service get zero wrong answers, `kubectl rollout
  status` says so, the PodDisruptionBudget refuses to evict the last right pod, and `helm rollback` restores it.

The node has no GPU: it advertises `amd.com/gpu` as an extended resource (what the AMD device plugin does) because the
chart always requests one; the CPU build of vLLM serves without it. The tests share one release; each starts from it
installed and serving (the `serving` fixture puts it back), whatever the test before left. The Service's
EndpointSlices and the server pods are judged from the API server's watch (every change, in order), not from samples:
"the endpoint never left the Service" is what the API server said, not what two samples happened to miss."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_health.canary.problems import generate, parse_answer
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.vllm_server import CPU_ARGS

from tests.support import tiers
from tests.support.canary import CFG, CanaryTiming, measure_timing, record_baseline
from tests.support.crowd import crowd
from tests.support.images import CPU_TARGET
from tests.support.kube_node import NODE, NodeCluster, Watch, WatchEvent
from tests.support.terminal import say
from tests.support.vllm_server import GOOD_MODEL, start

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "vllm-rocm"
HELM = WORK / "bin" / "helm"
NS = "serve"
RELEASE = "llm"
FULLNAME = f"{RELEASE}-vllm-rocm"
SERVER = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=server"  # the release's server pods
SLICES = f"kubernetes.io/service-name={FULLNAME}"  # the Service's EndpointSlices
SERVED = "smollm2-135m-instruct"
GOOD = f"/models/{SERVED}"
BAD = f"/models/{SERVED}-perturbed"
# A vLLM start in a pod took ~1-3 min on the busy 2-core machine (the same as under podman); this bounds one that
# will not come.
START_TIMEOUT = 900
# Greedy completions this long tell the perturbed model from the right one (it often still gets a short sum right).
MAX_TOKENS = 16
# `reference` first, before the node's session fixtures: its vLLM server runs while the images are still being built
# and the cluster started, not after them (run 48, fresh clone: 2.7 min of the session's chain, after the images
# arrived 19.8 min in).
pytestmark = [pytest.mark.system, pytest.mark.crowd, pytest.mark.timeout(3600), pytest.mark.usefixtures("reference")]


def helm(
    cluster: NodeCluster, *args: str, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return cluster.run(str(HELM), *args, timeout=timeout, check=check, env=cluster.client_env)


class Pods:
    """What the tests read of the release's server pods, in the cluster's network namespace."""

    def __init__(self, cluster: NodeCluster) -> None:
        self.c = cluster

    def list(self) -> list[dict[str, Any]]:
        return [
            p for p in self.c.get("pods", "-n", NS, "-l", SERVER)["items"] if not p["metadata"].get("deletionTimestamp")
        ]

    @staticmethod
    def ready(pod: dict[str, Any]) -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))

    def metrics(self, pod: dict[str, Any]) -> dict[str, float]:
        ip = pod["status"].get("podIP")
        if not ip:
            return {}
        r = self.c.run("curl", "-sf", "--max-time", "5", f"http://{ip}:9400/metrics", check=False)
        out: dict[str, float] = {}
        for line in r.stdout.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def readyz(self, pod: dict[str, Any]) -> str:
        ip = pod["status"].get("podIP")
        return self.c.run("curl", "-s", "--max-time", "5", f"http://{ip}:9400/readyz", check=False).stdout


def canary_passes(metrics: dict[str, float]) -> float:
    return metrics.get('vllm_canary_runs_total{outcome="pass"}', 0.0)


def watches(cluster: NodeCluster) -> tuple[Watch, Watch]:
    """The Service's EndpointSlices (what kube-proxy routes to) and the release's server pods, watched."""
    return cluster.watch("endpointslices", "-n", NS, "-l", SLICES), cluster.watch("pods", "-n", NS, "-l", SERVER)


def states(events: list[WatchEvent]) -> list[dict[str, dict[str, Any]]]:
    """The watched objects, by name, after each event."""
    current: dict[str, dict[str, Any]] = {}
    out = []
    for event in events:
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            current.pop(name, None)
        else:
            current[name] = event.obj
        out.append(dict(current))
    return out


def in_service(slices: dict[str, dict[str, Any]], pod: str) -> bool:
    """Whether the EndpointSlices route to `pod`: its endpoint is there and ready."""
    return any(
        (e.get("targetRef") or {}).get("name") == pod and bool((e.get("conditions") or {}).get("ready"))
        for s in slices.values()
        for e in s.get("endpoints") or []
    )


def live(pods: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in pods.items() if not p["metadata"].get("deletionTimestamp")}


def vllm_status(pod: dict[str, Any]) -> dict[str, Any]:
    return next((s for s in pod["status"].get("containerStatuses", []) if s["name"] == "vllm"), {})


def listed(watch: Watch, pod: str) -> int:
    """Wait for the watch's starting list to show `pod` in the Service; the number of events it took (the judged
    history starts with the state after them)."""
    return watch.wait(lambda ev: len(ev) if ev and in_service(states(ev)[-1], pod) else 0, 120, f"{pod} listed")


def service_ip(cluster: NodeCluster) -> str:
    return cluster.get("service", "-n", NS, FULLNAME)["spec"]["clusterIP"]


class CompletionFailed(AssertionError):
    def __init__(self, base: str, code: int, took: float, stderr: str) -> None:
        self.code, self.took = code, took
        super().__init__(f"completion at {base} failed (curl exit {code}) after {took:.1f} s: {stderr.strip()}")


def complete(cluster: NodeCluster, base: str, prompt: str, max_time: float = 120) -> str:
    """One greedy completion. A connection that is not accepted within 10 s fails (curl 28) without waiting for
    `max_time`, the bound on the answer."""
    body = json.dumps({"model": SERVED, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
    began = time.monotonic()
    r = cluster.run(
        "curl", "-sSf", "--connect-timeout", "10", "--max-time", f"{max_time:.0f}",
        "-H", "Content-Type: application/json", "-d", body, f"{base}/v1/completions",
        check=False, timeout=max_time + 30,
    )  # fmt: skip
    if r.returncode != 0:
        raise CompletionFailed(base, r.returncode, time.monotonic() - began, r.stderr)
    return json.loads(r.stdout)["choices"][0]["text"]


# The client that sends requests through the Service during the rollout: it runs inside the cluster's network
# namespace (the Service IP exists only there) and writes one JSON line per request.
CLIENT = r"""
import json, os, sys, time, urllib.request
url, model, out, stop, problems = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
max_tokens = int(sys.argv[6])
i = 0
with open(out, "a") as f:
    while not os.path.exists(stop):
        prompt, answer = problems[i % len(problems)]
        i += 1
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
        t = time.time()
        try:
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            text = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["text"]
            f.write(json.dumps({"t": t, "prompt": prompt, "want": answer, "text": text}) + "\n")
        except Exception as e:
            f.write(json.dumps({"t": t, "prompt": prompt, "error": repr(e)}) + "\n")
        f.flush()
        time.sleep(1.0)
"""


@dataclass(frozen=True)
class Reference:
    baseline: Path
    timing: CanaryTiming


@pytest.fixture(scope="session")  # set up before the crowd lock, the images and the node (pytestmark)
@tiers.needs("integration", "starts a vLLM CPU server on this machine")
def reference(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Reference:
    """The pods' canary baseline and the module's timings, from the good model on a vLLM CPU server on this machine,
    stopped before the release is installed: nothing here asks it anything later, and through the module's ~20 minutes
    it would hold ~2.5 GB and its idle polling (~1 CPU-s a minute) beside the pods. The shared session server of the
    integration tests (tests/conftest.py) stays up for its session, whose tests ask it."""
    tmp = tmp_path_factory.mktemp("reference")
    say(request.config, "reference: starting a vLLM CPU server for the pods' baseline")
    server = start(GOOD_MODEL, "smollm2-135m-instruct", tmp)
    try:
        baseline = record_baseline(server.base_url, tmp / "baseline.json")
        timing = measure_timing(server.base_url, baseline)
    finally:
        server.stop()
    say(request.config, f"reference: baseline recorded, a canary run takes {timing.run:.1f} s; its server stopped")
    return Reference(baseline, timing)


@pytest.fixture(scope="module", autouse=True)
def _one_crowd(request: pytest.FixtureRequest) -> Iterator[None]:
    """Two or three vLLM pods at once: not while qualify's live runs run theirs (tests/support/crowd.py)."""
    with crowd("the node tests", request.config):
        yield


def compile_cache(cluster: NodeCluster) -> Path:
    """The host directory of the module's compile-cache volume."""
    return cluster.root / "compile-cache"


def host_volume(name: str, path: Path) -> list[dict[str, Any]]:
    """An operator's pre-provisioned volume on the node's directory `path`, and the claim bound to it, both `name`."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(path), "type": "Directory"},
                "claimRef": {"namespace": NS, "name": name},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


@pytest.fixture(scope="module")
def cluster(node_cluster: NodeCluster) -> NodeCluster:
    node_cluster.kubectl("create", "namespace", NS)
    # The extended resource the AMD device plugin would advertise; the chart requests amd.com/gpu per pod, and a
    # rolling update runs two pods at once.
    node_cluster.kubectl(
        "patch", "node", NODE, "--subresource=status", "--type=json",
        "-p", json.dumps([{"op": "add", "path": "/status/capacity/amd.com~1gpu", "value": "2"}]),
    )  # fmt: skip
    # The compile cache, as an operator's pre-provisioned volume (compileCache.existingClaim): every server pod of
    # the module shares it, as a Deployment's pods share their PVC, so inductor's CPU sampler kernels (compiled with
    # g++ at a pod's first logprobs request: ~17 CPU-s, measured) are compiled by the first pod only. A hostPath is
    # not chowned for fsGroup: the directory belongs to the chart's vLLM user.
    cache = compile_cache(node_cluster)
    cache.mkdir(exist_ok=True)
    user = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]
    os.chown(cache, user["runAsUser"], user["runAsGroup"])
    node_cluster.apply(host_volume("compile-cache", cache), NS)
    # The models, as the operator's pre-provisioned volume: both directories of WORK/models, read-only.
    node_cluster.apply(host_volume("models", WORK / "models"), NS)
    return node_cluster


def values(cluster: NodeCluster, built_images: dict, baseline: Path, timing: CanaryTiming) -> dict[str, Any]:
    """The chart's values for a CPU node: every override is about the hardware (no GPU, 2 cores), the offline model or
    the test's pace; the accuracy gate, probes' targets, RBAC and rollout strategy are the chart's own."""

    def image(target: str) -> dict[str, str]:
        ref = built_images["by_target"][target]["image"]
        repo = ref.rsplit(":", 1)[0]
        return {"repository": repo, "digest": cluster.image_digest(ref), "pullPolicy": "Never"}

    return {
        "model": {"name": GOOD, "servedName": SERVED},
        "image": image(CPU_TARGET),
        "vllm": {"release": CPU_TARGET.removeprefix("vllm-rocm-").replace("_", ".")},
        "enforceEager": True,
        "maxModelLen": 2048,
        "extraArgs": ["--dtype", "bfloat16", "--seed", "0", *CPU_ARGS],
        "extraEnv": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "6Gi"}},
        "shm": {"sizeLimit": "1Gi"},
        "amdNodeAffinity": {"enabled": False},
        "modelCache": {"existingClaim": "models"},
        "compileCache": {"existingClaim": "compile-cache"},
        # Probe often (the tests judge joins and leaves), but let a /readyz slowed by two vLLM servers and the
        # other test session on the same 2 cores answer: a probe timeout is not the gate the tests look at.
        "probes": {"readiness": {"periodSeconds": 2, "failureThreshold": 3, "timeoutSeconds": 5}},
        "sidecar": {
            "image": image("vllm-rocm-health"),
            # Two vLLM servers share the 2 cores during the upgrade: the sidecar's default request timeout (60 s).
            # Every test here is judged on a first run (a new pod or engine instance is asked at once), never on a
            # later one, so the runs between are kept rare: at 2 measured intervals a pod's canary kept its server
            # ~30% of a core busy for the module's 20 minutes (180 CPU-s in 600 s, process accounting, 2026-12-05).
            "canaryInterval": max(60, int(6 * timing.interval + 0.999)),
            # Runs slow down while the upgrade's second server starts beside the first: a pass stays good for 10
            # intervals (not 3), so the right pod is not held out as stale while it waits for its next run.
            "canaryMaxAgeIntervals": 10,
            "canaryNumProblems": CFG["num_problems"],
        },
        "canary": {"baseline": baseline.read_text()},
    }


@pytest.fixture(scope="module")
def release(
    cluster: NodeCluster,
    built_images: dict,
    reference: Reference,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Any]]:
    """`helm install`, watched from before it starts until the pod is in the Service: the EndpointSlice and pod
    histories, and the sidecar's canary passes at the moment the pod joined, are what the first test judges."""
    tmp = tmp_path_factory.mktemp("release")
    vals = values(cluster, built_images, reference.baseline, reference.timing)
    (tmp / "values.yaml").write_text(yaml.safe_dump(vals))
    pods = Pods(cluster)
    slices, server_pods = watches(cluster)
    with slices, server_pods:
        say(request.config, "release: helm install")
        helm(cluster, "install", RELEASE, str(CHART), "-n", NS, "-f", str(tmp / "values.yaml"))

        def joined(events: list[WatchEvent]) -> str | None:
            return next((name for name in live(states(server_pods.events)[-1] if server_pods.events else {})
                         if events and in_service(states(events)[-1], name)), None)  # fmt: skip

        try:
            name = slices.wait(joined, START_TIMEOUT, "the installed pod in the Service", poll=1.0)
        except AssertionError as e:
            pod = (pods.list() or [{}])[0]
            logs = cluster.kubectl(
                "logs", "-n", NS, pod.get("metadata", {}).get("name", "none"), "--all-containers", "--tail=40",
                check=False,
            )  # fmt: skip
            pytest.fail(f"{e}\n{logs.stdout}{logs.stderr}")
        passes = canary_passes(pods.metrics(states(server_pods.events)[-1][name]))  # at once: the pass it joined on
        say(request.config, f"release: pod {name} in the Service")
        install = {
            "pod": name,
            "passes_when_joined": passes,
            "slices": list(slices.events),
            "pods": list(server_pods.events),
        }
    yield {"install": install, "values": vals, "tmp": tmp}
    helm(cluster, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False)


@dataclass
class Serving:
    pod: str  # the one server pod, Ready and in the Service
    base: str  # the Service's address


@pytest.fixture
def serving(cluster: NodeCluster, release: dict[str, Any]) -> Serving:
    """The release as installed, serving, whatever the test before left: rolled back to the installed values if a test
    left others, one server pod Ready and in the Service, and a completion answered through the Service's address
    (kube-proxy programs it after the EndpointSlice changes: the first tries may be refused)."""
    got = json.loads(helm(cluster, "get", "values", RELEASE, "-n", NS, "-o", "json").stdout)
    if got != release["values"]:
        helm(cluster, "rollback", RELEASE, "1", "-n", NS, "--wait", "--timeout", f"{START_TIMEOUT}s",
             timeout=START_TIMEOUT + 60)  # fmt: skip
    slices, server_pods = watches(cluster)
    with slices, server_pods:

        def one_serving(events: list[WatchEvent]) -> str | None:
            pods = live(states(server_pods.events)[-1]) if server_pods.events else {}
            if len(pods) != 1 or not events:
                return None
            [(name, pod)] = pods.items()
            return name if Pods.ready(pod) and in_service(states(events)[-1], name) else None

        name = slices.wait(one_serving, START_TIMEOUT, "one server pod, Ready and in the Service", poll=1.0)
    return Serving(name, through_service(cluster, name))


def through_service(cluster: NodeCluster, pod: str) -> str:
    """The Service's address, once a completion through it is answered.

    `pod` (Ready, in the EndpointSlices) is asked directly first: how long it takes to answer bounds each try through
    the Service, and a pod that does not answer is named as such, not as a Service fault. kube-proxy programs its rules
    after the EndpointSlice changes, so the first tries may be refused, or routed to a pod that is going away and
    never answer: each try is bounded and the next one starts, until the deadline."""
    ip = cluster.get("pod", "-n", NS, pod)["status"]["podIP"]
    began = time.monotonic()
    try:
        complete(cluster, f"http://{ip}:8000", "2+2=")
    except CompletionFailed as e:
        why = why_out(cluster, pod)
        raise AssertionError(f"{pod}, Ready and in the Service, did not answer directly: {e}\n{why}") from e
    direct = time.monotonic() - began
    per_try = max(30.0, 10 * direct)
    base = f"http://{service_ip(cluster)}:8000"
    deadline = time.monotonic() + max(180.0, 3 * per_try)
    tries: list[str] = []
    while True:
        try:
            assert complete(cluster, base, "2+2=", max_time=per_try)
            return base
        except CompletionFailed as e:
            tries.append(f"curl {e.code} after {e.took:.1f} s")
            if time.monotonic() > deadline:
                slices = cluster.get("endpointslices", "-n", NS, "-l", SLICES)["items"]
                raise AssertionError(
                    f"no completion through the Service {base} in {len(tries)} tries ({', '.join(tries)}); "
                    f"{pod} answered directly in {direct:.1f} s; its EndpointSlices: "
                    f"{[s.get('endpoints') for s in slices]}"
                ) from e
            time.sleep(1)


def test_pod_joins_the_service_only_after_its_canary_passed(
    cluster: NodeCluster, release: dict[str, Any], serving: Serving
) -> None:
    install = release["install"]
    name = install["pod"]
    pod = cluster.get("pod", "-n", NS, name)
    # The pod's readiness is the sidecar's /readyz, and nothing else: the vLLM container has no readiness probe.
    spec = {c["name"]: c for c in pod["spec"]["containers"]}
    assert "readinessProbe" not in spec["vllm"]
    assert spec["health"]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert [c["image"] for c in pod["spec"]["containers"]] == [
        f"{release['values']['image']['repository']}@{release['values']['image']['digest']}",
        f"{release['values']['sidecar']['image']['repository']}@{release['values']['sidecar']['image']['digest']}",
    ]
    # The first state of the EndpointSlices that routes to the pod (the watch's history: none before it did).
    joined = next(e for e, s in zip(install["slices"], states(install["slices"]), strict=True) if in_service(s, name))
    # vLLM answered /health (its startup probe passed) while the pod was still not Ready, so out of the Service:
    # the canary gate. The pod's history, as the API server recorded it.
    waiting = [
        e for e, s in zip(install["pods"], states(install["pods"]), strict=True)
        if name in s and vllm_status(s[name]).get("started") and not Pods.ready(s[name])
    ]  # fmt: skip
    assert waiting, f"never saw vLLM started while the pod was not Ready: {[e.type for e in install['pods']]}"
    # The sidecar's canary passes, read the moment the watch showed the pod in the Service.
    assert install["passes_when_joined"] >= 1, f"in the Service before any canary pass: {install['passes_when_joined']}"
    print(f"\nvLLM up, pod out of the Service for {joined.arrived - waiting[0].arrived:.0f} s until the canary passed")
    # And it serves through the Service (the fixture waited for kube-proxy's rules).
    assert complete(cluster, serving.base, "2+2=")
    # The chart's compile cache, on the operator's claim, is where vLLM's torch.compile writes on a read-only root:
    # the canary's logprobs made inductor compile its sampler kernels into it (the pods after this one load them).
    env = {e["name"]: e.get("value") for e in spec["vllm"].get("env", [])}
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/cache/inductor" and env["VLLM_CACHE_ROOT"] == "/cache/vllm", env
    assert any((compile_cache(cluster) / "inductor").rglob("*.so")), "inductor wrote no kernel into the compile cache"


def test_helm_test_passes(cluster: NodeCluster, serving: Serving) -> None:
    r = helm(cluster, "test", RELEASE, "-n", NS, "--logs", "--timeout", "300s", timeout=360, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vllm_canary_passing: 1.0" in r.stdout, r.stdout
    assert re.search(r"readyz: 200", r.stdout), r.stdout


def test_sidecar_follows_vllm_log_through_the_api(cluster: NodeCluster, serving: Serving) -> None:
    """The sidecar's Kubernetes log source, with the chart's ServiceAccount and Role: it read vLLM's own lines (the
    engine's mode and version come only from there) and reported on its pod with Events."""
    name = serving.pod
    pod = cluster.get("pod", "-n", NS, name)
    logs = cluster.kubectl("logs", "-n", NS, name, "-c", "health").stdout
    assert "403" not in logs and "Forbidden" not in logs, logs[-2000:]
    metrics = Pods(cluster).metrics(pod)
    assert metrics, "no sidecar metrics"
    readyz = json.loads(Pods(cluster).readyz(pod))
    assert readyz.get("ready") is True, readyz
    events = cluster.get("events", "-n", NS, "--field-selector", f"involvedObject.name={name}")["items"]
    sources = {e.get("reportingComponent") or e.get("source", {}).get("component") for e in events}
    assert any(e["reason"] not in ("Scheduled", "Pulled", "Created", "Started") for e in events), (
        f"no Event from the sidecar on its pod: {[(e['reason'], e.get('message')) for e in events]} {sources}"
    )


def sidecar_probe_pod(
    cluster: NodeCluster, name: str, account: str, target: str, refused: str | None = None
) -> tuple[str, bool]:
    """A pod running only the chart's sidecar container, as `account`, told (POD_NAME) to follow `target`'s vLLM log:
    what the sidecar can do with that account's grants, without starting another vLLM. Returns its log and /readyz
    once the text `refused` shows in them (refused None: once its metrics count a line of `target`'s log read), and
    whether it did; else when the pod ended or after 120 s. Asked until then, not once after a pause: the sidecar's
    first calls come whenever its threads get to run."""
    rendered = helm(cluster, "get", "manifest", RELEASE, "-n", NS).stdout
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    health = next(c for c in template["spec"]["containers"] if c["name"] == "health")
    health["env"] = [e for e in health["env"] if e["name"] != "POD_NAME"] + [{"name": "POD_NAME", "value": target}]
    health.pop("readinessProbe", None)
    health.pop("livenessProbe", None)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"test": "rbac"}},
        "spec": {
            **{k: v for k, v in template["spec"].items() if k not in ("containers", "affinity", "tolerations")},
            "serviceAccountName": account,
            "containers": [health],
            "restartPolicy": "Never",
        },
    }
    cluster.apply([pod], NS)
    deadline = time.monotonic() + 120
    pods = Pods(cluster)
    out, done = "", False
    while not done and time.monotonic() < deadline:
        p = cluster.get("pod", "-n", NS, name)
        ended = p["status"].get("phase") in ("Failed", "Succeeded")
        up = bool(p["status"].get("podIP")) and not ended
        out = cluster.kubectl("logs", "-n", NS, name, check=False).stdout
        out += "\n/readyz: " + (pods.readyz(p) if up else "")
        if refused is not None:
            done = refused in out
        else:
            done = up and pods.metrics(p).get("vllm_sidecar_log_lines_total", 0) > 0
        if ended:
            break
        if not done:
            time.sleep(1)
    cluster.kubectl("delete", "pod", "-n", NS, name, "--grace-period=0", "--force", "--wait=false", check=False)
    return out, done


def test_each_rule_of_the_chart_rbac_is_needed(cluster: NodeCluster, serving: Serving) -> None:
    """With the chart's ServiceAccount the sidecar reads the server's log; with an account bound to the chart's Role
    minus one rule, or to nothing, it fails, and says so in its log and /readyz."""
    target = serving.pod
    ok, read = sidecar_probe_pod(cluster, "rbac-chart", FULLNAME, target)
    assert read, f"with the chart's account the sidecar read no line of {target}'s log:\n{ok[-3000:]}"
    assert "403" not in ok and "Forbidden" not in ok, ok[-3000:]
    role = next(
        d
        for d in yaml.safe_load_all(helm(cluster, "get", "manifest", RELEASE, "-n", NS).stdout)
        if d and d["kind"] == "Role"
    )
    failures = {}
    for i, rule in enumerate([*role["rules"], None]):
        account = f"rbac-minus-{i}"
        rules = [r for r in role["rules"] if r is not rule] if rule else []
        cluster.apply(
            [
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": account},
                    "rules": rules,
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": account},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                    "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS}],
                },
            ],  # fmt: skip
            NS,
        )
        # The first call the sidecar makes without the grant, named as the API server names it.
        verb, resource = (rule["verbs"][0], rule["resources"][0]) if rule else ("get", "pods")
        refused = f'cannot {verb} resource "{resource}"'
        out, seen = sidecar_probe_pod(cluster, f"rbac-minus-{i}", account, target, refused)
        failures[json.dumps(rule)] = out
        assert seen, f"without {rule} no visible failure:\n{out[-3000:]}"
    for rule_text, out in failures.items():
        print(f"\nwithout {rule_text}: {[ln for ln in out.splitlines() if 'HTTP 403' in ln][:1]}")


def started_at(status: dict[str, Any]) -> float:
    """Unix time the container's current instance started (the kubelet's RFC 3339 `startedAt`, whole seconds)."""
    text = status.get("state", {}).get("running", {}).get("startedAt")
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else 0.0


def test_killed_engine_leaves_the_service_until_its_canary_passes(cluster: NodeCluster, serving: Serving) -> None:
    pods = Pods(cluster)
    name = serving.pod
    pod = cluster.get("pod", "-n", NS, name)
    cid, restarts = vllm_status(pod)["containerID"], vllm_status(pod).get("restartCount", 0)
    before = canary_passes(pods.metrics(pod))

    def restarted(p: dict[str, Any]) -> bool:
        return vllm_status(p).get("restartCount", 0) > restarts and Pods.ready(p)

    slices, server_pods = watches(cluster)
    with slices, server_pods:
        start = listed(slices, name)
        cluster.ctr("tasks", "kill", "-s", "SIGKILL", cid.removeprefix("containerd://"))

        def left_and_back(events: list[WatchEvent]) -> tuple[int, int] | None:
            after = states(events)[start - 1 :]  # from the state before the kill
            left = next((i for i, s in enumerate(after) if not in_service(s, name)), None)
            back = next((i for i, s in enumerate(after) if left is not None and i > left and in_service(s, name)), None)
            if left is not None and back is not None:
                return start - 1 + left, start - 1 + back
            # A restarted engine Ready for a minute while the EndpointSlices never dropped it: what the API server
            # recorded (the slice controller writes within a second of a readiness change), so a fact, not a sample.
            ready_since = next((e.arrived for e in server_pods.events if restarted(e.obj)), None)
            if left is None and ready_since is not None and time.time() - ready_since > 60:
                raise AssertionError(
                    "the endpoint never left the Service after the engine was killed: every EndpointSlice "
                    f"change since ({len(events) - start} of them) kept {name} ready"
                )
            return None

        left, back = slices.wait(
            left_and_back, START_TIMEOUT, "the pod out of the Service after the kill, and back", poll=5.0
        )
        metrics = pods.metrics(states(server_pods.events)[-1][name])  # at once: the pass it came back on
        new_engine = server_pods.wait(
            lambda ev: next((s[name] for s in reversed(states(ev)) if name in s and restarted(s[name])), None),
            120,
            "the pod's restarted vLLM container, Ready",
        )
    # The same pod, its vLLM container restarted (not the pod replaced), and back only after a canary pass on the
    # new engine: the sidecar's last pass (its clock, this machine's) no earlier than the new container's start.
    started = started_at(vllm_status(new_engine))
    assert metrics.get("vllm_canary_last_success_timestamp_seconds", 0.0) >= started > 0, (metrics, started)
    assert canary_passes(metrics) > before, (before, metrics)
    print(f"\nout of the Service for {slices.events[back].arrived - slices.events[left].arrived:.0f} s after the kill, "
          "back after a canary pass")  # fmt: skip


def why_out(cluster: NodeCluster, pod: str) -> str:
    """What a pod's events and its sidecar's last lines say (a probe that timed out, a canary run that erred)."""
    events = cluster.kubectl(
        "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={pod}",
        "-o", "custom-columns=TIME:.lastTimestamp,REASON:.reason,MESSAGE:.message", check=False,
    )  # fmt: skip
    logs = cluster.kubectl("logs", "-n", NS, pod, "-c", "health", "--tail", "40", check=False)
    return f"its events:\n{events.stdout}{events.stderr}\nits sidecar's last lines:\n{logs.stdout}{logs.stderr}"


def test_upgrade_to_a_wrong_server_stalls_and_rollback_restores(
    cluster: NodeCluster, release: dict[str, Any], serving: Serving
) -> None:
    """The perturbed model (HTTP 200, wrong tokens) stands in for a wrong cudagraph mode."""
    tmp: Path = release["tmp"]
    pods = Pods(cluster)
    old_name, base = serving.pod, serving.base
    # The client's questions and the right answers: what the right server answers, greedy, asked twice. Judged as the
    # canary judges, by the answer's number: the text after it may change when a request shares a batch with
    # another (bf16 batch composition; seen once during the upgrade: " 5\n5 + 1 = 6" then " 5\n5 + 2 = 7").
    # 16 sums: the perturbed model gets roughly a third of them wrong (the canary's 0.625 on it), so all 16 right
    # would be a ~0.1% chance, and the test says so below rather than passing without having seen one.
    prompts = [p.prompt for p in generate(7, 16)]
    first = {q: complete(cluster, base, q) for q in prompts}
    right = [(q, a) for q, a in first.items() if parse_answer(a) is not None and complete(cluster, base, q) == a]
    assert len(right) >= 6, f"the right server's answers changed between two asks: {first}"
    log, stop = tmp / "client.jsonl", tmp / "client.stop"
    log.unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-c",
        CLIENT,
        f"{base}/v1/completions",
        SERVED,
        str(log),
        str(stop),
        json.dumps(right),
        str(MAX_TOKENS),
    ]
    slices, server_pods = watches(cluster)
    with slices, server_pods:
        start = listed(slices, old_name)
        client = subprocess.Popen(cluster.argv(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            helm(cluster, "upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values", "--set", f"model.name={BAD}")

            # The new pod runs, is judged and fails its canary (its sidecar's metrics, polled: a count only grows).
            def new_pod_failing(events: list[WatchEvent]) -> str | None:
                new = {n: p for n, p in live(states(events)[-1]).items() if n != old_name} if events else {}
                fails = {n: pods.metrics(p).get('vllm_canary_runs_total{outcome="fail"}', 0.0) for n, p in new.items()}
                return next((n for n, f in fails.items() if f >= 1), None)

            new_name = server_pods.wait(
                new_pod_failing, START_TIMEOUT, "the new (perturbed) pod's canary failing", poll=2.0
            )
            # Every change of the EndpointSlices since the upgrade began: the wrong pod never in, the right one
            # never out.
            history = states(slices.events)[start - 1 :]
            assert not any(in_service(s, new_name) for s in history), "the wrong pod joined the Service"
            if not all(in_service(s, old_name) for s in history):
                pytest.fail(f"the right pod left the Service during the upgrade\n{why_out(cluster, old_name)}")
            new = cluster.get("pod", "-n", NS, new_name)
            # It really serves wrong tokens with HTTP 200: what the gate kept from users.
            wrong = [
                q
                for q, a in right
                if parse_answer(complete(cluster, f"http://{new['status']['podIP']}:8000", q)) != parse_answer(a)
            ]
            assert wrong, "the perturbed server answered every sum right: this test could not have seen a wrong answer"
            readyz = pods.readyz(new)
            assert "canary" in readyz, readyz
            # kubectl says the rollout is stuck.
            status = cluster.kubectl(
                "rollout", "status", f"deployment/{FULLNAME}", "-n", NS, "--timeout=5s", check=False
            )
            assert status.returncode != 0, status.stdout
            assert "1 old replicas are pending termination" in status.stdout + status.stderr, (
                status.stdout + status.stderr
            )
            # The PodDisruptionBudget: the wrong (not Ready) pod may be evicted, the last right one may not.
            refused = evict(cluster, old_name)
            assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused.stdout + refused.stderr
            # Roll back: the wrong pod goes, the right one never left.
            helm(cluster, "rollback", RELEASE, "1", "-n", NS)
            cluster.kubectl("rollout", "status", f"deployment/{FULLNAME}", "-n", NS, "--timeout=300s", timeout=330)
            server_pods.wait(
                lambda ev: set(live(states(ev)[-1])) == {old_name} and new_name not in states(ev)[-1],
                180,
                "the wrong pod gone after the rollback",
            )
            history = states(slices.events)[start - 1 :]
            assert not any(in_service(s, new_name) for s in history), "the wrong pod joined the Service"
            assert all(in_service(s, old_name) for s in history), "the right pod left the Service during the rollback"
        finally:
            stop.touch()
            try:
                client.wait(180)
            except subprocess.TimeoutExpired:
                client.kill()
    answers = [json.loads(line) for line in log.read_text().splitlines()]
    errors = [a for a in answers if "error" in a]
    wrong_served = [a for a in answers if "text" in a and parse_answer(a["text"]) != parse_answer(a["want"])]
    changes = len(slices.events) - start
    print(f"\n{len(answers)} requests through the Service during the upgrade and rollback: "
          f"{len(wrong_served)} wrong, {len(errors)} errors; {changes} EndpointSlice changes")  # fmt: skip
    assert len(answers) >= 10, answers
    assert not wrong_served, wrong_served
    assert not errors, errors


def evict(cluster: NodeCluster, pod: str) -> subprocess.CompletedProcess[str]:
    """The Eviction API, as `kubectl drain` calls it."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS}}
    return cluster.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{NS}/pods/{pod}/eviction",
        "-f",
        "-",
        stdin=json.dumps(body),
        check=False,
    )


# The qualification Job on the node. The CPU build runs every mode as NONE, so the Job qualifies NONE, without
# --enforce-eager (the mode must come from the report: the kubelet expands it into vLLM's arguments). A node label
# stands for the AMD node labeller's product name.
PRODUCT = "cpu-stand-in"
PRODUCT_LABEL = "amd.com/gpu.product-name"
# A Job (one vLLM start and qualify's --quick shapes, canary and throughput) and then a rollout (another start and a
# canary pass), each bounded like one start: what the upgrade may take before it is a hang.
QUALIFY_TIMEOUT = 2 * START_TIMEOUT
JOB = f"{FULLNAME}-qualify"


def job_logs(cluster: NodeCluster) -> str:
    """The Job's pods and each step's log (one by one: `--all-containers` refuses a pod whose later step never
    started, which is how a failed step leaves it)."""
    selector = "app.kubernetes.io/component=qualification"
    pods = cluster.kubectl("get", "pods", "-n", NS, "-l", selector, "-o", "wide", check=False)
    out = [f"the qualification Job's pods:\n{pods.stdout}{pods.stderr}"]
    for step in ("current", "qualify", "publish"):
        r = cluster.kubectl("logs", "-n", NS, "-l", selector, "-c", step, "--tail=40", check=False)
        out.append(f"step {step}:\n{r.stdout}{r.stderr}")
    return "\n".join(out)


def test_qualification_job_deploys_its_mode_and_a_failed_one_changes_nothing(
    cluster: NodeCluster, release: dict[str, Any], serving: Serving
) -> None:
    tmp: Path = release["tmp"]
    cluster.kubectl("label", "node", NODE, f"{PRODUCT_LABEL}={PRODUCT}", "--overwrite")
    vals = json.loads(json.dumps(release["values"]))
    vals["canary"] = {}  # the report carries the baseline
    vals["enforceEager"] = False
    vals["qualification"] = {"gpuProduct": PRODUCT, "job": {"enabled": True, "modes": ["NONE"], "args": ["--quick"]}}
    (tmp / "qualified.yaml").write_text(yaml.safe_dump(vals))
    old_pod = serving.pod
    began = time.monotonic()
    up = helm(cluster, "upgrade", RELEASE, str(CHART), "-n", NS, "-f", str(tmp / "qualified.yaml"), "--wait",
              "--timeout", f"{QUALIFY_TIMEOUT}s", timeout=QUALIFY_TIMEOUT + 120, check=False)  # fmt: skip
    took = time.monotonic() - began
    if up.returncode != 0:
        pytest.fail(f"helm upgrade with the qualification Job failed:\n{up.stdout}{up.stderr}\n{job_logs(cluster)}")
    job = cluster.get("job", "-n", NS, JOB)
    assert job["status"].get("succeeded") == 1, job["status"]
    name = job["metadata"]["annotations"]["vllm-rocm/qualification-configmap"]
    # The report the Job published: measured here, on this release, model and product, NONE recommended.
    cm = cluster.get("configmap", "-n", NS, name)
    assert cm["data"]["mode"] == "NONE", cm["data"].get("mode")
    report = json.loads(cm["data"]["report.json"])
    assert (report["recommended"], report["gpu_product"], report["served_model_name"]) == ("NONE", PRODUCT, SERVED)
    assert report["vllm_version"] == vals["vllm"]["release"]
    assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "vllm-rocm-qualification"
    # The Deployment rolled onto it: a new pod, on the product's node, its mode from the ConfigMap, expanded by the
    # kubelet (vLLM's own config line says NONE: an unexpanded `$(...)` would not parse), Ready after its canary
    # passed against the report's baseline.
    [pod] = Pods(cluster).list()
    assert pod["metadata"]["name"] != old_pod
    assert pod["spec"]["nodeSelector"] == {PRODUCT_LABEL: PRODUCT}
    vllm = next(c for c in pod["spec"]["containers"] if c["name"] == "vllm")
    from_cm = {"name": "VLLM_ROCM_CUDAGRAPH_MODE", "valueFrom": {"configMapKeyRef": {"name": name, "key": "mode"}}}
    assert from_cm in vllm["env"]
    assert '"cudagraph_mode":"$(VLLM_ROCM_CUDAGRAPH_MODE)"' in " ".join(vllm["args"])
    log = cluster.kubectl("logs", "-n", NS, pod["metadata"]["name"], "-c", "vllm").stdout
    assert "enforce_eager=False" in log and "'cudagraph_mode': <CUDAGraphMode.NONE: 0>" in log, log[-3000:]
    # A compile-mode start on the stand-in traces the model and runs it without inductor (images/standin.py,
    # STANDIN_ENV): ~70 CPU-s less for this pod and for the Job's server.
    assert "'backend': 'eager'" in log, log[-3000:]
    assert Pods.ready(pod)
    readyz = json.loads(Pods(cluster).readyz(pod))
    assert readyz.get("ready") is True, readyz
    assert canary_passes(Pods(cluster).metrics(pod)) >= 1
    base = through_service(cluster, pod["metadata"]["name"])
    print(f"\nqualification Job + rollout onto its report: {took:.0f} s")

    # A qualification that fails (its server may not take a second to start) fails the upgrade; the running pod,
    # its ConfigMap and the Deployment stay as they were.
    serving_pod = pod["metadata"]["name"]
    failing = json.loads(json.dumps(vals))
    failing["qualification"]["job"]["args"] = ["--quick", "--startup-timeout", "1"]
    (tmp / "failing.yaml").write_text(yaml.safe_dump(failing))
    down = helm(cluster, "upgrade", RELEASE, str(CHART), "-n", NS, "-f", str(tmp / "failing.yaml"), "--wait",
                "--timeout", f"{START_TIMEOUT}s", timeout=START_TIMEOUT + 120, check=False)  # fmt: skip
    assert down.returncode != 0, down.stdout
    assert "pre-upgrade hooks failed" in down.stderr, down.stderr
    job = cluster.get("job", "-n", NS, JOB)
    assert job["status"].get("failed", 0) >= 1 and not job["status"].get("succeeded"), job["status"]
    assert job["metadata"]["annotations"]["vllm-rocm/qualification-configmap"] != name
    logs = job_logs(cluster)
    assert "not ready within 1 s" in logs, logs
    deployment = cluster.get("deployment", "-n", NS, FULLNAME)
    assert from_cm in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    [pod] = Pods(cluster).list()
    assert pod["metadata"]["name"] == serving_pod and Pods.ready(pod)
    assert cluster.get("configmap", "-n", NS, name)["data"]["mode"] == "NONE"
    assert through_service(cluster, serving_pod) == base
