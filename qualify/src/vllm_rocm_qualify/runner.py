"""The qualification: the reference first, then each mode on its own server, same model and flags; after every
mode the report is written, so an interrupted run keeps what it measured (and `--resume` continues it)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner
from vllm_rocm_health.canary.client import CanaryError
from vllm_rocm_health.canary.runner import record_baseline

from . import report as rep
from . import shapes, template
from .client import Client, Output, RequestFailed
from .compare import compare_shape
from .config import QualifyConfig
from .logs import why_it_failed
from .machine import describe
from .processes import free_port
from .server import ModeServer, StartFailed, server_env
from .throughput import measure

REFERENCE_FILE = "reference.json"
BASELINE_FILE = "baseline.json"
_SAME_RUN = ("model", "served_model_name", "command", "server_args", "reference")  # what --resume must match


class NoReference(Exception):
    pass


def _tagged(say: Callable[[str], None], tag: str) -> Callable[[str], None]:
    """`say` with every message prefixed by `tag` (bound now, not when a message comes)."""
    return lambda m: say(f"{tag} {m}")


class Qualification:
    def __init__(self, cfg: QualifyConfig, say: Callable[[str], None]) -> None:
        cfg.validate()
        template.check(cfg.command, cfg.port)
        if not cfg.model.strip():
            raise ValueError("--model: give the model path or id the servers should load")
        cfg.served_model_name = cfg.served_model_name or cfg.model
        if cfg.reference == template.EAGER and "{mode_args}" not in shlex.split(cfg.command):
            raise ValueError("--reference eager needs {mode_args} in --command (it becomes --enforce-eager)")
        self.cfg = cfg
        self.say = say
        self.workdir = cfg.workdir
        self.env = server_env(cfg.workdir / "cache")
        for item in cfg.env:  # KEY=VALUE: cfg.validate() checked the =
            key, _, value = item.partition("=")
            self.env[key] = value
        self.server: ModeServer | None = None
        self.reference: dict[str, Any] | None = None  # shapes' requests and outputs, the throughput prompt
        self.report: dict[str, Any] = {}

    # --- order and resume -------------------------------------------------------------------------------------
    def labels(self) -> list[str]:
        """The reference first (NONE's row, or an extra eager run), then the other modes in the order given."""
        ref = self.cfg.reference
        return [ref] + [m for m in self.cfg.modes if m != ref]

    def _load_previous(self) -> dict[str, dict[str, Any]]:
        path = self.cfg.report_path
        ref_path, base_path = self.workdir / REFERENCE_FILE, self.workdir / BASELINE_FILE
        if not (self.cfg.resume and path.exists() and ref_path.exists() and base_path.exists()):
            if self.cfg.resume:
                self.say(f"--resume: no finished reference in {self.workdir}; starting from the beginning")
            return {}
        old = json.loads(path.read_text())
        if any(old.get(k) != getattr(self.cfg, k) for k in _SAME_RUN):
            raise ValueError(f"--resume: {path} was made with other settings ({', '.join(_SAME_RUN)} must match)")
        self.reference = json.loads(ref_path.read_text())
        self.report["baseline"] = old.get("baseline")
        self.report["vllm_version"] = old.get("vllm_version", "")
        done = {
            r.get("label", r["mode"]): r
            for r in old.get("rows", []) + old.get("reference_runs", [])
            if r.get("status") not in ("interrupted", "skipped")
        }
        if self.cfg.reference not in done:  # every kept row was compared with that reference run, or none is kept
            done = {}
        self.say(f"--resume: keeping {', '.join(done) or 'nothing'} from {path}")
        return done

    # --- the run ----------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        settings = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(cfg).items()
            if k not in _SAME_RUN + ("workdir", "out", "resume", "env")
        }
        self.report = rep.new(
            {
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": describe(),
                "vllm_version": "",
                **{k: getattr(cfg, k) for k in _SAME_RUN},
                "env": sorted(cfg.env),
                "settings": settings,
                "reference_runs": [],
            }
        )
        done = self._load_previous()
        labels = self.labels()
        t0 = time.monotonic()
        try:
            for i, label in enumerate(labels, 1):
                tag = f"[{i}/{len(labels)} {label}]"
                if label in done:
                    self._keep(done[label])
                    self.say(f"{tag} kept from the earlier run: {done[label].get('status')}")
                    continue
                if self.reference is None and i > 1:
                    self._keep(self._row(label, status="skipped", reason="the reference did not finish"))
                    continue
                self._keep(self._mode(label, i == 1, _tagged(self.say, tag)))
                self._save()
        except KeyboardInterrupt:
            self.say("interrupted: servers stopped; the report keeps the modes that finished")
            self.report["interrupted"] = True
            raise
        finally:
            self.report["seconds"] = round(time.monotonic() - t0, 1)
            self._save()
        return self.report

    def _save(self) -> None:
        rep.finish(self.report, self.cfg.rank_by)
        rep.save(self.report, self.cfg.report_path)

    def _keep(self, row: dict[str, Any]) -> None:
        key = "rows" if row.get("label", row["mode"]) != template.EAGER else "reference_runs"
        rows = [r for r in self.report[key] if r.get("label", r["mode"]) != row.get("label", row["mode"])]
        self.report[key] = rows + [row]

    def _row(self, label: str, **kw: Any) -> dict[str, Any]:
        is_ref = label == self.cfg.reference
        return {
            "mode": "NONE" if label == template.EAGER else label,
            "label": label,
            "role": "reference" if is_ref else "candidate",
            **kw,
        }

    def _mode(self, label: str, is_reference: bool, say: Callable[[str], None]) -> dict[str, Any]:
        cfg = self.cfg
        port = cfg.port or free_port()
        argv = template.expand(cfg.command, label, port, cfg.model, cfg.served_model_name, cfg.server_args)
        log_path = self.workdir / "logs" / f"{label}.log"
        mode = "NONE" if label == template.EAGER else label
        row = self._row(label, status="error", command=shlex.join(argv), log=str(log_path.relative_to(self.workdir)))
        say(f"starting: {shlex.join(argv)}")
        server = self.server = ModeServer(label, argv, log_path, self.env, f"http://{cfg.host}:{port}", mode)
        try:
            server.start(cfg.startup_timeout, say)
            row["ready_s"] = round(server.ready_seconds, 1)
            f = server.log.facts()
            say(
                f"ready in {server.ready_seconds:.1f} s: effective {f['effective_mode']}"
                + (
                    f", {sum(f['graphs'].values())} graphs, capture {f['capture_s']:.0f} s / {f['capture_gib']:.2f} GiB"
                    if f["capture_finished"]
                    else ""
                )
            )
            self._phases(server, row, is_reference, say)
            row["status"] = "ok"
            if not server.alive():
                row["status"], row["reason"] = "crashed", f"server exited: {why_it_failed(server.process.log_tail(60))}"
        except StartFailed as e:
            row["status"], row["reason"] = "start_failed", str(e)
            say(f"did not start: {e}")
        except (RequestFailed, CanaryError, NoReference) as e:
            row["reason"] = str(e)
            if not server.alive():
                row["status"], row["reason"] = (
                    "crashed",
                    f"{e}; server exited: {why_it_failed(server.process.log_tail(60))}",
                )
            say(f"stopped early: {row['reason']}")
        except KeyboardInterrupt:
            row["status"], row["reason"] = "interrupted", "Ctrl-C"
            self._keep({**row, **server.log.facts()})
            raise
        finally:
            server.log.poll()
            row.update(server.log.facts(), log_bytes=server.log.consumed)  # before stopping: shutdown noise
            # is not the start-up's; replay parses the same bytes
            code = server.stop()
            self.server = None
            say(f"stopped (exit {code})")
        if is_reference and row["status"] == "ok":
            self.report["vllm_version"] = row.get("vllm_version", "")
        row["verdict"], row["verdict_reason"] = rep.verdict(row)
        say(f"verdict: {row['verdict']}" + (f": {row['verdict_reason']}" if row["verdict_reason"] else ""))
        return row

    def _phases(self, server: ModeServer, row: dict[str, Any], is_reference: bool, say: Callable[[str], None]) -> None:
        cfg = self.cfg
        client = Client(server.base_url, cfg.served_model_name, cfg.request_timeout)
        try:
            if is_reference:
                plan = shapes.plan(client, cfg, client.max_model_len())
                say(f"reference prompts: {sum(len(v) for v in plan.values())} requests in {len(plan)} shapes")
            else:
                assert self.reference is not None
                plan = {
                    k: [shapes.Req(r["prompt"], r["max_tokens"]) for r in v]
                    for k, v in self.reference["shapes"].items()
                }
            outputs = shapes.run(client, plan, cfg, say)
            # Kept beside the report (not in it) so that answers can be looked at, or compared again, later.
            (self.workdir / "outputs").mkdir(exist_ok=True)
            (self.workdir / "outputs" / f"{row['label']}.json").write_text(
                json.dumps({k: [o.to_json() for o in v] for k, v in outputs.items()})
            )
            if is_reference:
                self._keep_reference(client, server.base_url, plan, outputs, row, say)
            else:
                assert self.reference is not None
                ref = {k: [Output.from_json(r["output"]) for r in v] for k, v in self.reference["shapes"].items()}
                row["agreement"] = {k: compare_shape(ref[k], outputs[k], cfg.tolerance) for k in plan}
                bad = [k for k, v in row["agreement"].items() if not v["ok"]]
                say("agreement: " + (f"FAILED in {', '.join(bad)}" if bad else "every shape agrees"))
            row["canary"] = self._canary(server.base_url)
            say(f"canary: {row['canary']['outcome']}: {row['canary']['reason']}")
            assert self.reference is not None
            row["throughput"] = measure(
                client, self.reference["tp_prompt"], cfg.concurrency, cfg.tp_tokens, cfg.tp_rounds, say
            )
        finally:
            client.close()

    def _keep_reference(
        self,
        client: Client,
        base_url: str,
        plan: dict[str, list[shapes.Req]],
        outputs: dict[str, list[Output]],
        row: dict[str, Any],
        say: Callable[[str], None],
    ) -> None:
        cfg = self.cfg
        failed = [(k, o.error) for k, v in outputs.items() for o in v if o.error]
        if failed:
            raise NoReference(
                f"the reference failed {len(failed)} of its own requests ({failed[0][0]}: {failed[0][1][:150]})"
            )
        self.reference = {
            "shapes": {
                k: [
                    {"prompt": r.prompt, "max_tokens": r.max_tokens, "output": o.to_json()}
                    for r, o in zip(plan[k], outputs[k], strict=True)
                ]
                for k in plan
            },
            "tp_prompt": shapes._prompt(client, 424242, cfg.tp_prompt_len),
        }
        (self.workdir / REFERENCE_FILE).write_text(json.dumps(self.reference))
        canary = CanaryConfig(num_problems=cfg.canary_problems, timeout=cfg.request_timeout)
        base = record_baseline(
            canary, base_url, cfg.served_model_name, notes=f"qualify reference {row['label']}: {cfg.model}"
        )
        base.save(self.workdir / BASELINE_FILE)
        self.report["baseline"] = dataclasses.asdict(base)
        say(f"baseline recorded: score {base.score:.2f} over {base.num_problems} problems")

    def _canary(self, base_url: str) -> dict[str, Any]:
        cfg = self.cfg
        canary = CanaryConfig(
            baseline=str(self.workdir / BASELINE_FILE),
            num_problems=cfg.canary_problems,
            max_requests=cfg.canary_problems + 8,
            timeout=cfg.request_timeout,
            fingerprint_tolerance=cfg.tolerance,
        )
        runner = CanaryRunner(canary, base_url, CollectorRegistry(), model=cfg.served_model_name)
        try:
            r = runner.run_once()
        finally:
            runner.close()
        return {
            "outcome": r.outcome,
            "reason": r.reason,
            "score": r.score,
            "drift": None if r.drift is None else round(r.drift, 4),
            "idle_probe": r.idle_probe,
        }

    def stop_servers(self) -> None:
        if self.server is not None:
            self.server.stop()
