"""A real Prometheus server for the local stack and the tests: config, start, readiness, queries, stop."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from vllm_rocm_qualify.processes import ManagedProcess, wait_until


@dataclass
class ScrapeTarget:
    job: str
    address: str  # host:port
    metrics_path: str = "/metrics"


def rules_with_for(source: Path, dest: Path, duration: str, alerts: Collection[str] = ()) -> Path:
    """A copy of the rule file `source` at `dest` with the `for:` of every alerting rule (or only of those named in
    `alerts`) set to `duration` (for tests and demos that cannot wait the minutes the shipped rules hold an alert
    pending); nothing else changes."""
    rules = yaml.safe_load(source.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and (not alerts or rule["alert"] in alerts):
                rule["for"] = duration
    dest.parent.mkdir(parents=True, exist_ok=True)
    which = "every alerting rule" if not alerts else ", ".join(sorted(set(alerts)))
    dest.write_text(
        f"# {source} with the `for:` of {which} set to {duration} (for tests and demos)\n"
        + yaml.safe_dump(rules, sort_keys=False, width=1000)
    )
    return dest


@dataclass
class PrometheusServer:
    workdir: Path
    port: int
    targets: list[ScrapeTarget]
    rule_files: list[Path] = field(default_factory=list)
    alertmanagers: list[str] = field(default_factory=list)  # host:port of the Alertmanagers alerts are sent to
    scrape_interval: str = "2s"
    evaluation_interval: str = "2s"
    binary: str = "prometheus"
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_config(self, with_rules: bool = True) -> Path:
        config: dict[str, Any] = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(p.resolve()) for p in self.rule_files] if with_rules else [],
            "scrape_configs": [
                {"job_name": t.job, "metrics_path": t.metrics_path, "static_configs": [{"targets": [t.address]}]}
                for t in self.targets
            ],
        }
        if self.alertmanagers:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(self.alertmanagers)}]}]}
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start(self, timeout: float = 30.0) -> None:
        """Start, and load the rules only once every target was scraped: evaluated before the first scrape, an
        `absent(up{...})` rule is true and its alert goes pending at every start (a false alarm)."""
        exe = shutil.which(self.binary)
        if exe is None:
            raise RuntimeError("prometheus is not on PATH: run `make setup` (installs the Debian package)")
        config = self.write_config(with_rules=False)
        tsdb = self.workdir / "tsdb"
        tsdb.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess(
            "prometheus",
            [
                exe,
                f"--config.file={config}",
                f"--storage.tsdb.path={tsdb}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            self.workdir / "prometheus.log",
        )
        self.process.start()
        if not wait_until(self.ready, timeout, interval=0.2):
            self._fail(f"prometheus did not become ready in {timeout:.0f} s")
        if self.rule_files:
            self._load_rules_after_first_scrape(timeout)

    def _fail(self, why: str) -> None:
        tail = self.process.log_tail() if self.process else ""
        self.stop()
        raise RuntimeError(f"{why}:\n{tail}")

    def _scraped_once(self) -> bool:
        if not self.ready():  # raises when the process exited
            return False
        targets = self.api("/api/v1/targets")["activeTargets"]
        return len(targets) == len(self.targets) and all(t["health"] != "unknown" for t in targets)

    def _load_rules_after_first_scrape(self, timeout: float) -> None:
        if not wait_until(self._scraped_once, timeout, interval=0.2):
            self._fail(f"prometheus did not scrape every target within {timeout:.0f} s")
        self.write_config(with_rules=True)
        try:
            urllib.request.urlopen(urllib.request.Request(self.url + "/-/reload", method="POST"), timeout=10).close()
        except (urllib.error.URLError, OSError) as e:
            self._fail(f"prometheus refused to reload its configuration with the rules: {e}")
        if not wait_until(self._rules_evaluated, timeout, interval=0.2):
            self._fail(f"prometheus did not load and evaluate the rules {[str(p) for p in self.rule_files]}")

    def _rules_evaluated(self) -> bool:
        rules = self.rules()
        return bool(rules) and all(r["health"] != "unknown" for r in rules)

    def ready(self) -> bool:
        if self.process is not None and not self.process.alive():
            raise RuntimeError(f"prometheus exited:\n{self.process.log_tail()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> Any:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        with urllib.request.urlopen(self.url + path + query, timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus API {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("/api/v1/query", query=expr)["result"]

    def targets_health(self) -> dict[str, str]:
        """job -> health ("up", "down", "unknown") of the active targets."""
        data = self.api("/api/v1/targets")
        return {t["labels"]["job"]: t["health"] for t in data["activeTargets"]}

    def alerts(self, state: str | None = None) -> list[dict[str, Any]]:
        alerts = self.api("/api/v1/alerts")["alerts"]
        return [a for a in alerts if state is None or a["state"] == state]

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.api("/api/v1/rules")["groups"] for r in g["rules"]]

    def stop(self) -> None:
        if self.process is None or not self.process.alive():
            return
        try:
            urllib.request.urlopen(urllib.request.Request(self.url + "/-/quit", method="POST"), timeout=5).close()
            deadline = time.monotonic() + 10
            while self.process.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        except (urllib.error.URLError, OSError):
            pass
        self.process.stop(timeout=5, sig=15)
