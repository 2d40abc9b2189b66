"""Run the whole stack on this machine: a real vLLM (CPU build), the health sidecar following its log and API,
and a Prometheus server that scrapes both and evaluates the shipped alert rules. Stops everything on Ctrl-C."""
from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from .config import DASHBOARD_JSON, REPO, StackConfig
from .grafana import write_provisioning
from .processes import ManagedProcess, wait_until
from .prometheus import PrometheusServer, ScrapeTarget
from .vllm_server import VllmServer

log = logging.getLogger(__name__)

ALERT_RULES = REPO / "charts" / "vllm-rocm" / "files" / "alerts.rules.yaml"
SIDECAR_JOB = "vllm-rocm-health"


def _say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def _http_json(url: str, timeout: float = 3.0) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (urllib.error.URLError, OSError, ValueError):
        return 0, {}


def first_answering(base: str, paths: list[str], answers: tuple[int, ...] = (200,), timeout: float = 3.0) -> str | None:
    """The first of base+path whose HTTP GET gets one of `answers` (after redirects), as the URL it ended at.
    Which UI paths a Prometheus serves depends on its build: Debian's 2.42 has only the classic UI (/classic/...)."""
    for path in paths:
        try:
            with urllib.request.urlopen(base + path, timeout=timeout) as r:
                if r.status in answers:
                    return r.geturl().rstrip("?")
        except urllib.error.HTTPError as e:
            if e.code in answers:  # e.g. /readyz: 503 "not ready" is an answer, with its reason
                return e.geturl().rstrip("?")
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return None


class Stack:
    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg
        self.stop_event = threading.Event()
        self.grafana_provisioning: Path | None = None  # written once Prometheus runs
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        self.vllm = VllmServer(
            model=cfg.model, served_model_name=cfg.served_model_name, port=cfg.vllm_port,
            log_path=cfg.workdir / "vllm.log", enforce_eager=cfg.enforce_eager,
        )
        self.sidecar = ManagedProcess(
            "health sidecar",
            [sys.executable, "-m", "vllm_rocm_health", "serve",
             "--vllm-url", cfg.vllm_url,
             "--listen", f"127.0.0.1:{cfg.sidecar_port}",
             "--log-source", f"file:{self.vllm.log_path}",
             "--canary-baseline", str(cfg.baseline_path),
             "--canary-interval", str(cfg.canary_interval)],
            cfg.workdir / "sidecar.log",
        )
        self.prometheus = PrometheusServer(
            workdir=cfg.workdir / "prometheus", port=cfg.prometheus_port,
            targets=[ScrapeTarget(SIDECAR_JOB, f"127.0.0.1:{cfg.sidecar_port}"),
                     ScrapeTarget("vllm", f"127.0.0.1:{cfg.vllm_port}")],
            rule_files=[ALERT_RULES],
        )

    # -- start-up -----------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.cfg.model.is_dir():
            raise RuntimeError(f"model {self.cfg.model} not found: run `make setup-vllm` (builds it offline)")
        if not ALERT_RULES.is_file():
            raise RuntimeError(f"alert rules {ALERT_RULES} missing")
        # Truncate the previous run's log: the sidecar follows this file from its start.
        self.vllm.log_path.write_bytes(b"")
        _say(f"starting vLLM (CPU) on {self.cfg.vllm_url} serving {self.cfg.served_model_name}; "
             f"log {self.vllm.log_path}")
        self.vllm.start(timeout=self.cfg.startup_timeout, progress=self._progress("vLLM"))
        _say(f"vLLM is up ({self.vllm.startup_seconds:.0f} s)")
        self._ensure_baseline()
        _say(f"starting the health sidecar on {self.cfg.sidecar_url} (following the vLLM log and API)")
        self.sidecar.start()
        if not wait_until(lambda: self._sidecar_alive() and _http_json(self.cfg.sidecar_url + "/healthz")[0] == 200,
                          60, interval=0.3):
            raise RuntimeError(f"the sidecar did not start:\n{self.sidecar.log_tail()}")
        _say(f"starting Prometheus on {self.prometheus.url} with {ALERT_RULES.relative_to(REPO)}")
        self.prometheus.start()
        self.grafana_provisioning = write_provisioning(self.cfg.workdir / "grafana", self.prometheus.url)

    def _sidecar_alive(self) -> bool:
        if not self.sidecar.alive():
            raise RuntimeError(f"the sidecar exited ({self.sidecar.returncode()}):\n{self.sidecar.log_tail()}")
        return True

    def _progress(self, what: str):
        last = [0.0]

        def tick(elapsed: float) -> None:
            if elapsed - last[0] >= 10:
                last[0] = elapsed
                line = self.vllm.last_log_line()
                _say(f"  waiting for {what}: {elapsed:.0f} s" + (f" | {line[:100]}" if line else ""))
        return tick

    def _ensure_baseline(self) -> None:
        """The canary compares against a baseline taken for this model and configuration. On the first run there is
        none: record one explicitly from this fresh server and say so. Never re-taken silently afterwards."""
        path = self.cfg.baseline_path
        if path.is_file():
            _say(f"canary baseline: {path}")
            return
        _say(f"no canary baseline yet: recording one from this server into {path} (delete it to re-record)")
        cmd = [sys.executable, "-m", "vllm_rocm_health", "baseline", "record", "--out", str(path),
               "--vllm-url", self.cfg.vllm_url]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"baseline record failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")

    # -- steady state -------------------------------------------------------------------------------------
    def status(self) -> dict:
        code, ready = _http_json(self.cfg.sidecar_url + "/readyz")
        out: dict = {"ready": code == 200, "ready_reason": ready.get("reason", ""), "canary_score": None,
                     "fingerprint_drift": None, "firing": [], "pending": [], "targets": {}}
        try:
            for key, expr in (("canary_score", "vllm_canary_score_ratio"),
                              ("fingerprint_drift", "vllm_canary_fingerprint_drift")):
                res = self.prometheus.query(expr)
                if res:
                    out[key] = float(res[0]["value"][1])
            out["targets"] = self.prometheus.targets_health()
            for a in self.prometheus.alerts():
                out.setdefault(a["state"], []).append(a["labels"]["alertname"])
        except (urllib.error.URLError, OSError, RuntimeError, KeyError, ValueError) as e:
            out["prometheus_error"] = str(e)
        return out

    def links(self) -> list[tuple[str, str | None, str]]:
        """(what, URL or None when no candidate answered, note) for the banner; every URL answered a GET."""
        c, prom = self.cfg, self.prometheus.url
        wanted = [
            ("vLLM API", c.vllm_url, ["/v1/models"], f"log: {self.vllm.log_path}"),
            ("vLLM metrics", c.vllm_url, ["/metrics"], ""),
            ("sidecar metrics", c.sidecar_url, ["/metrics"], ""),
            ("sidecar readiness", c.sidecar_url, ["/readyz"], "200 ready / 503 not ready, with the reason"),
            ("Prometheus alerts", prom, ["/alerts", "/classic/alerts"], f"rules: {ALERT_RULES.relative_to(REPO)}"),
            ("Prometheus targets", prom, ["/targets", "/classic/targets"], ""),
            ("Prometheus graph", prom, ["/graph", "/classic/graph"], ""),
        ]
        out = []
        for what, base, paths, note in wanted:
            url = first_answering(base, paths, (200, 503) if paths == ["/readyz"] else (200,))
            out.append((what, url, note if url else f"tried {', '.join(paths)}"))
        return out

    def print_banner(self) -> None:
        c = self.cfg
        lines = ["", "The stack is running. Where to look:"]
        for what, url, note in self.links():
            lines.append(f"  {what:<19} {url or '(not answering)'}" + (f"   ({note})" if note else ""))
        lines += [
            f"  {'Grafana':<19} none runs here; provisioning for one (this Prometheus + the chart's dashboard):",
            f"  {'':<19} GF_PATHS_PROVISIONING={self.grafana_provisioning} grafana server",
            f"  {'':<19} or import {DASHBOARD_JSON.relative_to(REPO)}",
            f"  {'try':<19} curl -s {c.vllm_url}/v1/completions -H 'Content-Type: application/json' \\",
            f"  {'':<19}   -d '{{\"model\": \"{c.served_model_name}\", \"prompt\": \"The capital of France is\", "
            f"\"max_tokens\": 8}}'",
            "Press Ctrl-C to stop everything.", ""]
        print("\n".join(lines), flush=True)

    def status_line(self) -> str:
        s = self.status()
        score = "n/a" if s["canary_score"] is None else f"{s['canary_score']:.2f}"
        drift = "n/a" if s["fingerprint_drift"] is None else f"{s['fingerprint_drift']:.3f}"
        targets = ", ".join(f"{k}={v}" for k, v in sorted(s["targets"].items())) or "n/a"
        ready = "yes" if s["ready"] else f"no ({s['ready_reason'] or 'no answer'})"
        return (f"ready={ready} | canary score={score} drift={drift} | targets: {targets} | "
                f"alerts firing={s['firing'] or 'none'} pending={s['pending'] or 'none'}")

    def run(self) -> int:
        self.start()
        self.print_banner()
        started = time.monotonic()
        while not self.stop_event.wait(self.cfg.status_interval):
            for name, proc_alive in (("vLLM", self.vllm.alive), ("sidecar", self.sidecar.alive)):
                if not proc_alive():
                    _say(f"{name} exited unexpectedly; stopping the stack")
                    return 1
            _say(self.status_line())
            if self.cfg.exit_after and time.monotonic() - started >= self.cfg.exit_after:
                break
        return 0

    def shutdown(self) -> None:
        _say("stopping: Prometheus, sidecar, vLLM")
        self.prometheus.stop()
        self.sidecar.stop(timeout=10)
        self.vllm.stop()
        _say("stopped")


def run_stack(cfg: StackConfig) -> int:
    stack = Stack(cfg)

    def on_signal(signum: int, _frame: object) -> None:
        stack.stop_event.set()
        raise KeyboardInterrupt

    # SIGINT explicitly too: Python leaves it ignored when the parent ignored it (a shell's background job, nohup),
    # and then Ctrl-C / `kill -INT` would never stop the stack.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return stack.run()
    except KeyboardInterrupt:
        return 0
    except RuntimeError as e:
        print(f"vllm-rocm-stack: error: {e}", file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not leave children behind
            signal.signal(sig, signal.SIG_IGN)
        stack.shutdown()


def run_compose(compose_files: list[Path], profiles: list[str]) -> int:
    """The ROCm path on a real AMD node: docker compose with the distribution's images."""
    for dev in ("/dev/kfd", "/dev/dri"):
        if not Path(dev).exists():
            print(f"vllm-rocm-stack: error: {dev} not found: the ROCm path needs an AMD GPU node "
                  "(use the default CPU stack on this machine)", file=sys.stderr)
            return 2
    cmd = ["docker", "compose"]
    for f in compose_files:
        cmd += ["-f", str(f)]
    for p in profiles:
        cmd += ["--profile", p]
    cmd += ["up", "--abort-on-container-exit"]
    _say(" ".join(cmd))
    return subprocess.call(cmd)
