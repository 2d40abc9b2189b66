"""Run the whole stack on this machine: a real vLLM (CPU build), the health sidecar following its log and API,
a Prometheus server that scrapes both and evaluates the shipped alert rules, and a real Alertmanager with the shipped
routing that notifies a webhook receiver the stack runs (notifications.jsonl). Stops everything on Ctrl-C."""

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
from collections.abc import Callable
from pathlib import Path

import yaml
from vllm_rocm_qualify.processes import ManagedProcess, wait_until

from . import readiness_alerts
from .alertmanager import EXAMPLE_CONFIG, AlertmanagerServer, WebhookReceiver, local_config
from .config import DASHBOARD_JSON, REPO, StackConfig
from .grafana import write_provisioning
from .prometheus import PrometheusServer, ScrapeTarget, rules_with_for
from .vllm_server import VllmServer

log = logging.getLogger(__name__)

ALERT_RULES = REPO / "charts" / "vllm-rocm" / "files" / "alerts.rules.yaml"
SIDECAR_JOB = "vllm-rocm-health"


def local_rules(dest: Path, alert_for: str = "", hold_for: str = "") -> Path:
    """The rules `make run`'s Prometheus loads when --alert-for or --hold-for shortens them: a copy of the shipped file
    whose readiness group --hold-for regenerated with those holds, and in which --alert-for set the `for:` of every
    other alerting rule. The readiness alerts are about how long a pod is held out: a short `for:` there would fire on
    every start, so only --hold-for shortens them, reason by reason."""
    text = ALERT_RULES.read_text()
    if hold_for:
        text = readiness_alerts.with_group(text, readiness_alerts.group(readiness_alerts.parse_holds(hold_for)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    if alert_for:
        groups = yaml.safe_load(text)["groups"]
        others = [r["alert"] for g in groups if g["name"] != readiness_alerts.GROUP for r in g["rules"] if "alert" in r]
        rules_with_for(dest, dest, alert_for, others)
    return dest


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
            model=cfg.model,
            served_model_name=cfg.served_model_name,
            port=cfg.vllm_port,
            log_path=cfg.workdir / "vllm.log",
            enforce_eager=cfg.enforce_eager,
        )
        self.sidecar = ManagedProcess(
            "health sidecar",
            [
                sys.executable,
                "-m",
                "vllm_rocm_health",
                "serve",
                "--vllm-url",
                cfg.sidecar_target_url,
                "--listen",
                f"127.0.0.1:{cfg.sidecar_port}",
                "--log-source",
                f"file:{self.vllm.log_path}",
                "--canary-baseline",
                str(cfg.baseline_path),
                "--canary-interval",
                str(cfg.canary_interval),
            ],
            cfg.workdir / "sidecar.log",
        )
        # --alert-for / --hold-for: Prometheus loads a copy of the rules with those holds shortened (written at start).
        shorter = cfg.alert_for or cfg.hold_for
        self.rules = cfg.workdir / "prometheus" / ALERT_RULES.name if shorter else ALERT_RULES
        self.notifications = cfg.workdir / "notifications.jsonl"
        self.receiver: WebhookReceiver | None = None  # listens from start() on
        self.alertmanager = AlertmanagerServer(
            workdir=cfg.workdir / "alertmanager", port=cfg.alertmanager_port, config={}
        )
        self.prometheus = PrometheusServer(
            workdir=cfg.workdir / "prometheus",
            port=cfg.prometheus_port,
            targets=[
                ScrapeTarget(SIDECAR_JOB, f"127.0.0.1:{cfg.sidecar_port}"),
                ScrapeTarget("vllm", f"127.0.0.1:{cfg.vllm_port}"),
            ],
            rule_files=[self.rules],
            alertmanagers=[f"127.0.0.1:{cfg.alertmanager_port}"],
        )

    # -- start-up -----------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.cfg.model.is_dir():
            raise RuntimeError(f"model {self.cfg.model} not found: run `make setup-vllm` (builds it offline)")
        if not ALERT_RULES.is_file():
            raise RuntimeError(f"alert rules {ALERT_RULES} missing")
        # Truncate the previous run's log: the sidecar follows this file from its start.
        self.vllm.log_path.write_bytes(b"")
        _say(
            f"starting vLLM (CPU) on {self.cfg.vllm_url} serving {self.cfg.served_model_name}; log {self.vllm.log_path}"
        )
        self.vllm.start(timeout=self.cfg.startup_timeout, progress=self._progress("vLLM"))
        _say(f"vLLM is up ({self.vllm.startup_seconds:.0f} s)")
        self._ensure_baseline()
        api = "API" if not self.cfg.sidecar_vllm_url else f"API through {self.cfg.sidecar_target_url}"
        _say(f"starting the health sidecar on {self.cfg.sidecar_url} (following the vLLM log and {api})")
        self.sidecar.start()
        if not wait_until(
            lambda: self._sidecar_alive() and _http_json(self.cfg.sidecar_url + "/healthz")[0] == 200, 60, interval=0.3
        ):
            raise RuntimeError(f"the sidecar did not start:\n{self.sidecar.log_tail()}")
        self._start_alerting()
        rules = str(ALERT_RULES.relative_to(REPO))
        if self.cfg.alert_for or self.cfg.hold_for:
            local_rules(self.rules, self.cfg.alert_for, self.cfg.hold_for)
            changes = [f"`for:` {self.cfg.alert_for} (--alert-for)"] if self.cfg.alert_for else []
            changes += [f"holds {self.cfg.hold_for} (--hold-for)"] if self.cfg.hold_for else []
            rules += f" ({', '.join(changes)}, in {self.rules})"
        _say(f"starting Prometheus on {self.prometheus.url} with {rules}, sending alerts to Alertmanager")
        self.prometheus.start()
        self.grafana_provisioning = write_provisioning(self.cfg.workdir / "grafana", self.prometheus.url)

    def _start_alerting(self) -> None:
        """The webhook receiver, then Alertmanager with the shipped routing, every receiver pointed at it."""
        self.notifications.write_bytes(b"")  # this run's notifications only, like vllm.log
        self.receiver = WebhookReceiver(self.cfg.receiver_port, self.notifications, say=_say)
        self.receiver.start()
        _say(
            f"started the webhook receiver on {self.receiver.url}: one JSON line per notification in "
            f"{self.notifications}"
        )
        self.alertmanager.config = local_config(
            yaml.safe_load(EXAMPLE_CONFIG.read_text()), self.receiver.url, timing=self.cfg.alert_for
        )
        timing = f", group_wait/group_interval {self.cfg.alert_for} (--alert-for)" if self.cfg.alert_for else ""
        _say(
            f"starting Alertmanager on {self.alertmanager.url} with {EXAMPLE_CONFIG.relative_to(REPO)} "
            f"(every receiver a webhook to the receiver{timing})"
        )
        self.alertmanager.start()

    def _sidecar_alive(self) -> bool:
        if not self.sidecar.alive():
            raise RuntimeError(f"the sidecar exited ({self.sidecar.returncode()}):\n{self.sidecar.log_tail()}")
        return True

    def _progress(self, what: str) -> Callable[[float], None]:
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
        cmd = [
            sys.executable,
            "-m",
            "vllm_rocm_health",
            "baseline",
            "record",
            "--out",
            str(path),
            "--vllm-url",
            self.cfg.vllm_url,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"baseline record failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")

    # -- steady state -------------------------------------------------------------------------------------
    def status(self) -> dict:
        code, ready = _http_json(self.cfg.sidecar_url + "/readyz")
        out: dict = {
            "ready": code == 200,
            "ready_reason": ready.get("reason", ""),
            "canary_score": None,
            "fingerprint_drift": None,
            "firing": [],
            "pending": [],
            "targets": {},
            "notifications": self.receiver.count if self.receiver else 0,
        }
        try:
            for key, expr in (
                ("canary_score", "vllm_canary_score_ratio"),
                ("fingerprint_drift", "vllm_canary_fingerprint_drift"),
            ):
                res = self.prometheus.query(expr)
                if res:
                    out[key] = float(res[0]["value"][1])
            out["targets"] = self.prometheus.targets_health()
            for a in self.prometheus.alerts():
                name, reason = a["labels"]["alertname"], a["labels"].get("reason")
                out.setdefault(a["state"], []).append(f"{name}({reason})" if reason else name)
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
            (
                "Alertmanager API",
                self.alertmanager.url,
                ["/api/v2/alerts"],
                f"no web UI in Debian's package: amtool --alertmanager.url={self.alertmanager.url} alert query",
            ),
            (
                "webhook receiver",
                self.receiver.url if self.receiver else "",
                ["/"],
                "Alertmanager's notifications arrive here",
            ),
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
        shortened = (
            f"; every rule's `for:` but the readiness ones is {c.alert_for} (--alert-for)" if c.alert_for else ""
        )
        shortened += f"; readiness holds {c.hold_for} (--hold-for)" if c.hold_for else ""
        lines += [
            f"  {'notifications':<19} {self.notifications}   (one JSON line per notification, each also printed "
            f"here; routing: {EXAMPLE_CONFIG.relative_to(REPO)}{shortened})",
            f"  {'Grafana':<19} none runs here; provisioning for one (this Prometheus + the chart's dashboard):",
            f"  {'':<19} GF_PATHS_PROVISIONING={self.grafana_provisioning} grafana server",
            f"  {'':<19} or import {DASHBOARD_JSON.relative_to(REPO)}",
            f"  {'try':<19} curl -s {c.vllm_url}/v1/completions -H 'Content-Type: application/json' \\",
            f'  {"":<19}   -d \'{{"model": "{c.served_model_name}", "prompt": "The capital of France is", '
            f'"max_tokens": 8}}\'',
            "Press Ctrl-C to stop everything.",
            "",
        ]
        print("\n".join(lines), flush=True)

    def status_line(self) -> str:
        s = self.status()
        score = "n/a" if s["canary_score"] is None else f"{s['canary_score']:.2f}"
        drift = "n/a" if s["fingerprint_drift"] is None else f"{s['fingerprint_drift']:.3f}"
        targets = ", ".join(f"{k}={v}" for k, v in sorted(s["targets"].items())) or "n/a"
        ready = "yes" if s["ready"] else f"no ({s['ready_reason'] or 'no answer'})"
        return (
            f"ready={ready} | canary score={score} drift={drift} | targets: {targets} | "
            f"alerts firing={s['firing'] or 'none'} pending={s['pending'] or 'none'} | "
            f"notifications={s['notifications']}"
        )

    def run(self) -> int:
        self.start()
        self.print_banner()
        started = time.monotonic()
        while not self.stop_event.wait(self.cfg.status_interval):
            for name, proc_alive in (
                ("vLLM", self.vllm.alive),
                ("sidecar", self.sidecar.alive),
                ("Alertmanager", self.alertmanager.alive),
            ):
                if not proc_alive():
                    _say(f"{name} exited unexpectedly; stopping the stack")
                    return 1
            _say(self.status_line())
            if self.cfg.exit_after and time.monotonic() - started >= self.cfg.exit_after:
                break
        return 0

    def shutdown(self) -> None:
        """Stop whatever was started, in order; a step that fails does not keep the next ones from running."""
        _say("stopping: Prometheus, Alertmanager, webhook receiver, sidecar, vLLM")
        steps = [
            ("Prometheus", self.prometheus.stop),
            ("Alertmanager", self.alertmanager.stop),
            ("webhook receiver", self.receiver.stop if self.receiver else lambda: None),
            ("sidecar", lambda: self.sidecar.stop(timeout=10)),
            ("vLLM", self.vllm.stop),
        ]
        for what, stop in steps:
            try:
                stop()
            except Exception as e:  # noqa: BLE001 - report it and go on stopping the rest
                print(f"vllm-rocm-stack: stopping {what} failed: {e}", file=sys.stderr)
        _say("stopped")


def run_stack(cfg: StackConfig) -> int:
    problems = cfg.problems()
    if problems:
        for p in problems:
            print(f"vllm-rocm-stack: error: {p}", file=sys.stderr)
        return 2
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
            print(
                f"vllm-rocm-stack: error: {dev} not found: the ROCm path needs an AMD GPU node "
                "(use the default CPU stack on this machine)",
                file=sys.stderr,
            )
            return 2
    cmd = ["docker", "compose"]
    for f in compose_files:
        cmd += ["-f", str(f)]
    for p in profiles:
        cmd += ["--profile", p]
    cmd += ["up", "--abort-on-container-exit"]
    _say(" ".join(cmd))
    return subprocess.call(cmd)
