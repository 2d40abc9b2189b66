"""`compose up` for real: docker/compose.yaml + the CPU overlay (compose.cpu.yaml) + the baseline overlay, profile
monitoring, with podman-compose: vLLM (the image the session built on the CPU stand-in), the sidecar, Prometheus and
Alertmanager (the pinned releases, from Debian's packages: no registry is reachable here), wired by compose.yaml
itself; Alertmanager notifies a webhook receiver this test runs on the compose network's gateway.

One life of the stack, as an operator lives it:
1. vLLM comes up; the accuracy reference is recorded from it (`vllm-rocm-health baseline record`, as the README
   says); the rest comes up; every healthcheck passes, the sidecar is Ready, no alert is pending or firing.
2. The model is swapped for the perturbed copy (`VLLM_MODEL_DIR=... up -d --force-recreate --no-deps vllm`):
   the sidecar says 503, the canary alert fires in Prometheus and Alertmanager delivers it to the receiver.
3. Back to the good model: the alert resolves and the receiver hears that too.
4. The qualified overlay (compose.qualified.yaml) on the same vLLM (no other vLLM start): its gate container runs
   for real (a passing mode goes through, a failed one is refused), and the sidecar, recreated with a report, is
   Ready on a report of this release, model and mode, and 503 with each runtime rule under compose: a report of
   another release (`release_not_qualified`), a report that failed the mode vLLM runs
   (`mode_failed_qualification`), a mode other than the one asked (`mode_mismatch`).
5. `compose down` leaves nothing running; the named volumes hold what compose.yaml says they hold.

Grafana (no Debian package) is not started; `service_healthy` ordering is not enforced by podman 4.3 (see
docker/README.md, "Tested without a GPU").
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from vllm_rocm_stack.alertmanager import EXAMPLE_CONFIG, WebhookReceiver, local_config, notifications
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.images.build import store_lock
from vllm_rocm_stack.images.podman import Podman
from vllm_rocm_stack.images.standin import StandIns, cpu_release
from vllm_rocm_stack.prometheus import rules_with_for

from tests.support import tiers
from tests.support.http import get
from tests.support.images import CPU_TARGET
from tests.support.vllm_server import free_port

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
FILES = [DOCKER / "compose.yaml", DOCKER / "compose.cpu.yaml", DOCKER / "compose.baseline.yaml"]
# Step 4: the qualified overlay instead of the baseline one (vLLM is not recreated under it: the sidecar and the gate).
QUALIFIED = [DOCKER / "compose.yaml", DOCKER / "compose.cpu.yaml", DOCKER / "compose.qualified.yaml"]
RULES = REPO / "charts" / "vllm-rocm" / "files" / "alerts.rules.yaml"
RUNBOOK = REPO / "charts" / "vllm-rocm" / "docs" / "runbook.md"
PROJECT = "vllm-rocm-test"
SERVICES = ["vllm", "health", "prometheus", "alertmanager"]
GOOD = WORK / "models" / "smollm2-135m-instruct"
BAD = WORK / "models" / "smollm2-135m-instruct-perturbed"
CANARY_FAILURES = ("VllmCanaryScoreBelowThreshold", "VllmCanaryFingerprintDrift")
# A vLLM start on 2 busy cores took ~1-3 min; this bounds a start that will not come.
START_TIMEOUT = 900
# The shipped prometheus.yml scrapes and evaluates every 15 s; the test's copy of the rules holds the canary alerts
# pending for one evaluation (the others as shipped), and Alertmanager groups for 5 s (routing otherwise as shipped).
ALERT_FOR = "15s"
GROUP_TIMING = "5s"

pytestmark = pytest.mark.system


class Stack:
    def __init__(self, podman: Podman, env: dict[str, str], ports: dict[str, int], tmp: Path) -> None:
        self.podman, self.env, self.ports, self.tmp = podman, env, ports, tmp

    def compose(self, *args: str, timeout: float = 600, files: list[Path] = FILES, **extra: str) -> str:
        proc = self.compose_rc(*args, timeout=timeout, files=files, **extra)
        assert proc.returncode == 0, (
            f"podman-compose {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout

    def recreate_vllm(self, model_dir: Path) -> None:
        """`up -d --force-recreate --no-deps vllm` on another model, the old container stopped first with time to
        exit: on a loaded machine vLLM took longer than podman-compose's 10 s to stop, and the SIGKILL that followed
        raced the removal (the new container found its port still bound; seen once beside the other session)."""
        name = self.containers(all_=False).get("vllm")
        if name:
            self.podman("stop", "--time", "120", name)
        self.compose("up", "-d", "--force-recreate", "--no-deps", "vllm", VLLM_MODEL_DIR=str(model_dir))

    def compose_rc(
        self, *args: str, timeout: float = 600, files: list[Path] = FILES, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return self.podman.compose(files, PROJECT, *args, env={**self.env, **extra}, timeout=timeout, check=False)

    def containers(self, all_: bool = True) -> dict[str, str]:
        """service -> container name, of this project."""
        argv = ["ps", "--format", "json", "--filter", f"label=io.podman.compose.project={PROJECT}"]
        out = json.loads(self.podman(*argv, *(["--all"] if all_ else [])).stdout or "[]")
        return {c["Labels"]["com.docker.compose.service"]: c["Names"][0] for c in out}

    def running(self, service: str) -> str:
        """ "" when the service's container runs, else its state and log tail."""
        name = self.containers().get(service)
        if not name:
            return f"no {service} container"
        state = self.podman.inspect(name)["State"]
        if state["Running"]:
            return ""
        logs = self.podman("logs", "--tail", "60", name, check=False)
        return f"{service} is {state['Status']} (exit {state['ExitCode']}):\n{logs.stdout}{logs.stderr}"

    def url(self, service: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}{path}"

    def wait(self, what: str, check, timeout: float, services: tuple[str, ...] = ()) -> float:  # noqa: ANN001
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if check():
                return time.monotonic() - t0
            for s in services:
                why = self.running(s)
                assert not why, f"while waiting for {what}: {why}"
            time.sleep(1)
        pytest.fail(f"{what}: not within {timeout:.0f} s; what the stack says:\n{self.diagnose()}")

    def model_mount(self) -> str:
        """The host directory the vLLM container serves its model from."""
        mounts = json.loads(self.podman("inspect", self.containers()["vllm"], "--format", "{{json .Mounts}}").stdout)
        return next(m["Source"] for m in mounts if m["Destination"] == "/models/model")

    def diagnose(self) -> str:
        """What a person needs to see when a wait ran out: each part's own view, and the logs' tails."""
        out = [f"containers: {self.containers()}"]
        for label, url in (
            ("sidecar /readyz", self.url("health", "/readyz")),
            ("Prometheus alerts", self.url("prometheus", "/api/v1/alerts")),
            ("Alertmanager alerts", self.url("alertmanager", "/api/v2/alerts")),
        ):
            code, body = get(url)
            out.append(f"{label}: {code} {body[:1500].decode(errors='replace')}")
        code, body = get(self.url("health", "/metrics"))
        out.append(
            "sidecar canary metrics: "
            + " | ".join(
                line
                for line in body.decode(errors="replace").splitlines()
                if line.startswith("vllm_canary_") and not line.startswith("vllm_canary_request")
            )[:3000]
        )
        if self.containers().get("vllm"):
            out.append(f"vllm model mount: {self.model_mount()}")
            code, body = get(self.url("vllm", "/v1/models"))
            out.append(f"vllm /v1/models: {code} {body[:300]!r}")
        for service in ("health", "alertmanager", "vllm"):
            name = self.containers().get(service)
            if name:
                logs = self.podman("logs", "--tail", "25", name, check=False)
                out.append(f"{service} log:\n{logs.stdout[-2500:]}{logs.stderr[-2500:]}")
        return "\n".join(out)

    def prom(self, path: str) -> dict:
        code, body = get(self.url("prometheus", path))
        assert code == 200, (path, code, body[:300])
        return json.loads(body)["data"]


@pytest.fixture(scope="module")
def monitoring_images(podman: Podman) -> dict[str, str]:
    with store_lock():
        standins = StandIns(podman.b)
        return {kind: standins.monitoring(kind).name for kind in ("prometheus", "alertmanager")}


@pytest.fixture(scope="module")
@tiers.needs("system", "starts the compose stack under podman")
def stack(
    podman: Podman, built_images: dict, monitoring_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    for model in (GOOD, BAD):
        if not (model / "config.json").is_file():
            pytest.fail(f"{model} is missing: run `make setup-vllm` (make test does it)")
    tmp = tmp_path_factory.mktemp("compose")
    ports = {s: free_port() for s in (*SERVICES, "grafana")}
    env = {
        "VLLM_IMAGE": built_images["by_target"][CPU_TARGET]["image"],
        "HEALTH_IMAGE": built_images["by_target"]["vllm-rocm-health"]["image"],
        "PROMETHEUS_IMAGE": monitoring_images["prometheus"],
        "ALERTMANAGER_IMAGE": monitoring_images["alertmanager"],
        "VLLM_MODEL_DIR": str(GOOD),
        "CANARY_BASELINE": str(tmp / "baseline.json"),
        "ALERT_RULES_FILE": str(rules_with_for(RULES, tmp / "alerts.rules.yaml", ALERT_FOR, CANARY_FAILURES)),
        "ALERTMANAGER_CONFIG": str(tmp / "alertmanager.yml"),
        "VLLM_PORT_HOST": str(ports["vllm"]),
        "HEALTH_PORT_HOST": str(ports["health"]),
        "PROMETHEUS_PORT_HOST": str(ports["prometheus"]),
        "ALERTMANAGER_PORT_HOST": str(ports["alertmanager"]),
        "GRAFANA_PORT_HOST": str(ports["grafana"]),
    }
    s = Stack(podman, env, ports, tmp)
    s.compose("--profile", "monitoring", "down", "--volumes", timeout=300)  # an interrupted earlier run
    try:
        yield s
    finally:
        podman.compose(
            FILES, PROJECT, "--profile", "monitoring", "down", "--volumes", env=env, timeout=300, check=False
        )


# One stack life is three vLLM starts and two alert cycles; each wait inside has its own bound (START_TIMEOUT, and
# `patience` from the measured start and canary run), which this only backs up.
@pytest.mark.timeout(3600)
def test_compose_up_alert_reaches_the_receiver(stack: Stack) -> None:
    t_start = time.monotonic()
    # 1. vLLM first: the accuracy reference is recorded from it, as docker/README.md says.
    stack.compose("up", "-d", "vllm")
    took = stack.wait("vLLM /health", lambda: get(stack.url("vllm", "/health"))[0] == 200, START_TIMEOUT, ("vllm",))
    print(f"compose test: vLLM healthy after {took:.0f} s")
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "baseline",
            "record",
            "--out",
            stack.env["CANARY_BASELINE"],
            "--vllm-url",
            stack.url("vllm", ""),
            "--notes",
            "compose test: the good model",
            # A request of a shape the server has not compiled yet compiles it first: on a loaded machine that can
            # take as long as the start did (the default 60 s per request timed out once beside the other session).
            "--timeout",
            str(max(120.0, 2 * took)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    canary_run = time.monotonic() - t0
    patience = 10 * canary_run + 2 * took + 180

    # The receiver, on the compose network's gateway: what host.containers.internal names inside the containers.
    network = json.loads(stack.podman("network", "inspect", f"{PROJECT}_default").stdout)[0]
    gateway = network["subnets"][0]["gateway"]
    receiver = WebhookReceiver(free_port(), stack.tmp / "notifications.jsonl", say=print, host=gateway)
    receiver.start()
    try:
        config = local_config(
            yaml.safe_load(EXAMPLE_CONFIG.read_text()),
            f"http://host.containers.internal:{receiver.port}",
            timing=GROUP_TIMING,
        )
        Path(stack.env["ALERTMANAGER_CONFIG"]).write_text(yaml.safe_dump(config, sort_keys=False))
        # --no-deps with every service named: podman-compose 1.6 otherwise links each container to its depends_on
        # with `podman --requires`, and a later recreate of vLLM alone fails to remove the linked containers and
        # restarts the old ones with exit 0 (model_mount() below is how that was found). Docker Compose needs none.
        stack.compose("--profile", "monitoring", "up", "-d", "--no-deps", *SERVICES)
        running = stack.containers(all_=False)
        assert sorted(running) == sorted(SERVICES), running
        _healthy(stack, patience)
        _alert_cycle(stack, receiver, patience)
    finally:
        receiver.stop()
    _qualified_authority(stack, patience)
    _down(stack)
    print(
        f"compose test: vLLM healthy after {took:.0f} s, a canary run {canary_run:.0f} s, "
        f"whole life {time.monotonic() - t_start:.0f} s"
    )


def _healthy(stack: Stack, patience: float) -> None:
    stack.wait("sidecar /readyz 200", lambda: get(stack.url("health", "/readyz"))[0] == 200, patience, SERVICES)
    names = stack.containers(all_=False)
    for service in SERVICES:  # what podman's healthcheck timer would run, there being no systemd here
        ok, out = stack.podman.healthcheck(names[service])
        assert ok, f"{service}: healthcheck failed: {out}"
    targets = {}

    def scraped() -> bool:
        targets.update({t["labels"]["job"]: t["health"] for t in stack.prom("/api/v1/targets")["activeTargets"]})
        return targets.get("vllm-rocm-health") == "up" and targets.get("vllm") == "up"

    stack.wait("Prometheus scraping the sidecar and vLLM", scraped, patience, SERVICES)
    # Every rule group evaluated twice after both targets were up: an `absent()` rule of another group than the
    # first may have gone pending before the first scrape, and only its own group's next evaluation clears it.
    seen: dict[str, set[str]] = {}

    def evaluated_twice() -> bool:
        for group in stack.prom("/api/v1/rules")["groups"]:
            seen.setdefault(group["name"], set()).add(group["lastEvaluation"])
        return all(len(times) >= 3 for times in seen.values())

    evaluated_twice()  # the evaluations before this moment
    stack.wait("two rule evaluations of every group after ready", evaluated_twice, 120, SERVICES)
    assert stack.prom("/api/v1/alerts")["alerts"] == [], "an alert is pending or firing on a healthy stack"
    am = json.loads(get(stack.url("alertmanager", "/api/v2/status"))[1])
    assert am["cluster"]["status"] == "disabled" and "host.containers.internal" in am["config"]["original"]


def _alert_cycle(stack: Stack, receiver: WebhookReceiver, patience: float) -> None:
    notes = receiver.out_path
    assert notifications(notes) == [], "a healthy start notified something"
    instance = "health:9400"  # the target as the shipped prometheus.yml names it

    def notified(status: str) -> list[tuple[dict, dict]]:
        return [
            (p, a)
            for p in notifications(notes)
            for a in p["alerts"]
            if a["labels"].get("alertname") in CANARY_FAILURES
            and a["labels"].get("instance") == instance
            and a["status"] == status
        ]

    # 2. The perturbed model, as an operator swaps a model: the vLLM service restarted with another volume.
    t0 = time.monotonic()
    stack.recreate_vllm(BAD)
    assert stack.model_mount() == str(BAD)
    saw_503 = []

    def not_ready() -> bool:
        code, body = get(stack.url("health", "/readyz"))
        if code == 503:
            saw_503.append(json.loads(body)["reason"])
        return code == 503

    stack.wait("sidecar 503 after the model swap", not_ready, patience, SERVICES)
    stack.wait("a canary alert notified", lambda: bool(notified("firing")), patience, SERVICES)
    fired = time.monotonic() - t0
    payload, alert = notified("firing")[0]
    assert payload["receiver"] == "vllm-rocm-critical" and payload["status"] == "firing", payload
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["job"] == "vllm-rocm-health", alert
    assert instance in alert["annotations"]["summary"] and alert["annotations"]["description"], alert
    name = alert["labels"]["alertname"]
    assert alert["annotations"]["runbook_url"] == f"charts/vllm-rocm/docs/runbook.md#{name.lower()}", alert
    assert f"\n## {name}\n" in RUNBOOK.read_text()
    firing = {a["labels"]["alertname"] for a in stack.prom("/api/v1/alerts")["alerts"] if a["state"] == "firing"}
    assert name in firing, firing
    code, body = get(stack.url("health", "/readyz"))
    assert code == 503 and json.loads(body)["reason"], body

    # 3. The good model back: the alert resolves, the receiver hears it, the sidecar is Ready again.
    t1 = time.monotonic()
    stack.recreate_vllm(GOOD)
    assert stack.model_mount() == str(GOOD)
    stack.wait(
        "the resolved notification",
        lambda: any(a["labels"]["alertname"] == name for _, a in notified("resolved")),
        patience,
        SERVICES,
    )
    stack.wait(
        "sidecar Ready on the good model", lambda: get(stack.url("health", "/readyz"))[0] == 200, patience, SERVICES
    )
    print(
        f"model swap -> notified firing {fired:.0f} s ({name}; 503 reasons {sorted(set(saw_503))[:3]}), "
        f"swap back -> resolved {time.monotonic() - t1:.0f} s"
    )


def _qualified_authority(stack: Stack, patience: float) -> None:
    """4. compose.qualified.yaml gives the sidecar the chart's authority: the report (its baseline, failed modes and
    release) and the deployed mode. vLLM keeps running (the CPU build, eager: its config line says NONE); the gate
    runs in the sidecar image as compose runs it, and the sidecar is recreated under the overlay with each report."""
    baseline = json.loads(Path(stack.env["CANARY_BASELINE"]).read_text())
    release = cpu_release()

    def report(name: str, version: str, rows: dict[str, str], recommended: str) -> str:
        raw = {
            "kind": "vllm-rocm-qualification",
            "format": 1,
            "vllm_version": version,
            "served_model_name": baseline["model"],
            "rows": [{"mode": m, "verdict": v, "verdict_reason": f"{v} in this test"} for m, v in rows.items()],
            "recommended": recommended,
            "baseline": baseline,
        }
        path = stack.tmp / f"report-{name}.json"
        path.write_text(json.dumps(raw))
        return str(path)

    both = {"NONE": "pass", "FULL_AND_PIECEWISE": "pass", "FULL": "fail"}
    good = report("good", release, both, "NONE")
    env = {"QUALIFICATION_REPORT": good, "VLLM_MODEL": baseline["model"]}
    # The gate, for real in the sidecar image (read-only root, no network): the recommended mode goes through...
    gate = stack.compose_rc("run", "--rm", "--no-deps", "qualification", files=QUALIFIED, **env)
    assert gate.returncode == 0 and "qualified: cudagraph_mode NONE" in gate.stdout + gate.stderr, gate
    # ...a mode the report failed does not: vLLM and the sidecar would never start.
    refused = stack.compose_rc(
        "run", "--rm", "--no-deps", "qualification", files=QUALIFIED, **env, VLLM_CUDAGRAPH_MODE="FULL"
    )
    assert refused.returncode != 0 and "FULL failed qualification" in refused.stdout + refused.stderr, refused

    cases = [
        # (report, VLLM_CUDAGRAPH_MODE, readiness, reason code, words in the reason)
        (good, "", 200, "ok", "ok"),
        (report("other-release", "0.33.0", both, "NONE"), "", 503, "release_not_qualified", "measured on vLLM 0.33.0"),
        (
            report("none-failed", release, {"NONE": "fail", "FULL_AND_PIECEWISE": "pass"}, "FULL_AND_PIECEWISE"),
            "",
            503,
            "mode_failed_qualification",
            "vLLM runs cudagraph_mode NONE",
        ),
        (good, "FULL_AND_PIECEWISE", 503, "mode_mismatch", "the deployment asked for FULL_AND_PIECEWISE"),
    ]
    for path, mode, want, code, words in cases:
        t0 = time.monotonic()
        case = {**env, "QUALIFICATION_REPORT": path, "VLLM_CUDAGRAPH_MODE": mode}
        stack.compose("up", "-d", "--force-recreate", "--no-deps", "health", files=QUALIFIED, **case)
        reason = _wait_readiness(stack, want, words, patience, f"{Path(path).name}, mode {mode or '(report)'}")
        metrics = get(stack.url("health", "/metrics"))[1].decode()
        if code != "ok":
            assert f'vllm_sidecar_not_ready_reason{{reason="{code}"}} 1.0' in metrics, (code, reason)
        took = time.monotonic() - t0
        print(f"compose qualified overlay: {Path(path).name}, mode {mode or '(report)'} -> {code} in {took:.0f} s")
    # The gate's volume is the overlay's own: gone with it (step 5 checks what compose.yaml's volumes hold).
    stack.podman("volume", "rm", "--force", f"{PROJECT}_qualified", check=False)


def _wait_readiness(stack: Stack, want: int, words: str, patience: float, what: str) -> str:
    """Wait until the sidecar's /readyz answers `want` with `words` in its reason; returns the reason."""
    seen: list[tuple[int, str]] = []

    def judged() -> bool:
        status, body = get(stack.url("health", "/readyz"))
        if status in (200, 503):
            seen.append((status, json.loads(body)["reason"]))
        return bool(seen) and seen[-1][0] == want and words in seen[-1][1]

    stack.wait(f"sidecar /readyz {want} ({words}) on {what}", judged, patience, ("vllm", "health"))
    return seen[-1][1]


def _down(stack: Stack) -> None:
    """5. down: nothing runs; the named volumes stay and hold what compose.yaml says."""
    stack.compose("--profile", "monitoring", "down", timeout=300)  # without the profile its services stay up
    assert stack.containers() == {}, stack.containers()
    volumes = {}
    for name in ("vllm-logs", "compile-cache", "hf-cache", "prometheus-data", "alertmanager-data"):
        info = json.loads(stack.podman("volume", "inspect", f"{PROJECT}_{name}").stdout)[0]
        volumes[name] = Path(info["Mountpoint"])
    log = (volumes["vllm-logs"] / "vllm.log").read_text(errors="replace")
    # three engines wrote to it: the good model, the perturbed one, the good one again (vLLM 0.32.0's entry.py line)
    assert log.count("Starting vLLM server on http://0.0.0.0:8000") == 3, log[-2000:]
    assert (volumes["prometheus-data"] / "wal").is_dir(), list(volumes["prometheus-data"].iterdir())
    assert (volumes["alertmanager-data"] / "nflog").is_file(), list(volumes["alertmanager-data"].iterdir())
    assert volumes["hf-cache"].is_dir()  # the model came from a mounted directory: nothing from a hub
    # The engines' compile cache: the canary's logprobs made inductor compile the CPU sampler's kernels there, once
    # (the later engines loaded them), as uid 2000 on a volume that took its owner from the image's /cache.
    kernels = list((volumes["compile-cache"] / "inductor").rglob("*.so"))
    assert kernels and all(k.stat().st_uid == 2000 for k in kernels), kernels
    stack.compose("--profile", "monitoring", "down", "--volumes", timeout=300)
    gone = stack.podman("volume", "ls", "--format", "{{.Name}}").stdout.split()
    assert not [v for v in gone if v.startswith(f"{PROJECT}_")], gone
