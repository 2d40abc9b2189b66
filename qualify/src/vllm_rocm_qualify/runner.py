"""The qualification: the reference and the other modes, each on its own server, same model and flags.

Servers start side by side (`--parallel`, default all at once; spread over the GPUs, see devices.py), each with its
own port, log and compile cache. The reference runs its shapes first; every other mode runs the same requests as
soon as its server is ready and the reference has answered, concurrently; then the throughput rounds, one mode at a
time while the others idle, interleaved (round r: every mode once, the order reversed every other round so that a
drift of the machine falls on all alike). A mode whose answers are already wrong is measured in the first round only
(it cannot be recommended). `--parallel 1` starts one server at a time and stops it before the next, as qualify
did before; its rounds then run back to back. After every group of servers the report is written, so an interrupted
run keeps what it measured (and `--resume` continues it)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner
from vllm_rocm_health.canary.client import CanaryError
from vllm_rocm_health.canary.runner import record_baseline

from . import devices, shapes, template
from . import report as rep
from .client import Client, Output, RequestFailed
from .compare import compare_shape
from .config import QualifyConfig
from .logs import why_it_failed
from .machine import describe
from .processes import free_port
from .server import ModeServer, StartFailed, server_env
from .throughput import combine, measure

REFERENCE_FILE = "reference.json"
BASELINE_FILE = "baseline.json"
_SAME_RUN = ("model", "served_model_name", "command", "server_args", "reference")  # what --resume must match
PROGRESS_EVERY = 15.0  # seconds between status lines while servers start or compare
LOG_TAIL_LINES = 20  # of a server that did not start or crashed, kept in its row


class NoReference(Exception):
    pass


class Aborted(Exception):
    """Ctrl-C in the main thread: a worker stops at its next phase."""


def _tagged(say: Callable[[str], None], tag: str) -> Callable[[str], None]:
    """`say` with every message prefixed by `tag` (bound now, not when a message comes)."""
    return lambda m: say(f"{tag} {m}")


@dataclasses.dataclass
class ModeRun:
    """One mode in this run: its server, its row as it fills, where it is."""

    label: str
    is_reference: bool
    say: Callable[[str], None]
    row: dict[str, Any]
    server: ModeServer | None = None
    client: Client | None = None
    state: str = "waiting"
    measurable: bool = False  # answers compared and canary run without a failed request: throughput may follow
    finished: bool = False  # its row is final (failed, or measured)
    rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class Qualification:
    def __init__(self, cfg: QualifyConfig, say: Callable[[str], None]) -> None:
        cfg.validate()
        template.check(cfg.command, cfg.port)
        if not cfg.model.strip():
            raise ValueError("--model: give the model path or id the servers should load")
        cfg.served_model_name = cfg.served_model_name or cfg.model
        if cfg.reference == template.EAGER and "{mode_args}" not in shlex.split(cfg.command):
            raise ValueError("--reference eager needs {mode_args} in --command (it becomes --enforce-eager)")
        if cfg.port and cfg.parallel != 1 and len(self._labels(cfg)) > 1:
            raise ValueError("--port gives every server the same port: with it, give --parallel 1")
        self.cfg = cfg
        self._lock = threading.Lock()
        self.say = self._locked(say)
        self.workdir = cfg.workdir
        self.env = server_env(cfg.workdir / "cache")
        self.extra_env = dict(item.partition("=")[::2] for item in cfg.env)  # cfg.validate() checked the =
        self.runs: list[ModeRun] = []
        self.reference: dict[str, Any] | None = None  # shapes' requests and outputs, the throughput prompt
        self.reference_answered = threading.Event()  # the reference's shapes ran (or it failed)
        self.baseline_recorded = threading.Event()  # the reference's canary baseline is written (or it failed)
        self.abort = threading.Event()
        self.report: dict[str, Any] = {}
        self._said: set[str] = set()

    def _locked(self, say: Callable[[str], None]) -> Callable[[str], None]:
        def locked(m: str) -> None:
            with self._lock:
                say(m)

        return locked

    # --- order and resume -------------------------------------------------------------------------------------
    @staticmethod
    def _labels(cfg: QualifyConfig) -> list[str]:
        ref = cfg.reference
        return [ref] + [m for m in cfg.modes if m != ref]

    def labels(self) -> list[str]:
        """The reference first (NONE's row, or an extra eager run), then the other modes in the order given."""
        return self._labels(self.cfg)

    def _load_previous(self) -> dict[str, dict[str, Any]]:
        path = self.cfg.report_path
        ref_path, base_path = self.workdir / REFERENCE_FILE, self.workdir / BASELINE_FILE
        if not (self.cfg.resume and path.exists() and ref_path.exists() and base_path.exists()):
            if self.cfg.resume:
                self.say(f"--resume: no finished reference in {self.workdir}; starting from the beginning")
            return {}
        old = json.loads(path.read_text())
        if any(old.get(k) != getattr(self.cfg, k) for k in _SAME_RUN) or old.get("gpu_product", "") != (
            self.cfg.gpu_product
        ):
            raise ValueError(
                f"--resume: {path} was made with other settings ({', '.join(_SAME_RUN)}, gpu_product must match)"
            )
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
            self.reference = None
        self.say(f"--resume: keeping {', '.join(done) or 'nothing'} from {path}")
        if self.reference is not None:
            self.reference_answered.set()
            self.baseline_recorded.set()
        return done

    # --- the run ----------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        settings = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(cfg).items()
            if k not in _SAME_RUN + ("workdir", "out", "resume", "env", "gpu_product")
        }
        self.report = rep.new(
            {
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": describe(),
                "vllm_version": "",
                **{k: getattr(cfg, k) for k in _SAME_RUN},
                # What it measured on, when said: deployment refuses the report on another GPU product.
                **({"gpu_product": cfg.gpu_product} if cfg.gpu_product else {}),
                "env": sorted(cfg.env),
                "settings": settings,
                "reference_runs": [],
            }
        )
        done = self._load_previous()
        labels = self.labels()
        for i, label in enumerate(labels, 1):
            if label in done:
                self._keep(done[label])
                self.say(f"[{i}/{len(labels)} {label}] kept from the earlier run: {done[label].get('status')}")
        todo = [label for label in labels if label not in done]
        size = cfg.parallel or len(todo) or 1
        groups = [todo[i : i + size] for i in range(0, len(todo), size)]
        self.report["rounds"] = {"count": cfg.rounds, "groups": groups}
        placements = self._placements(groups) if todo else {}  # refused here: nothing started, nothing written
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            for group in groups:
                if self.reference is None and cfg.reference not in group:
                    for label in group:
                        self._keep(self._row(label, status="skipped", reason="the reference did not finish"))
                    continue
                self._group(group, placements, labels)
                self._save()
        except KeyboardInterrupt:
            self.say("interrupted: servers stopped; the report keeps the modes that finished")
            self.report["interrupted"] = True
            raise
        finally:
            self.report["seconds"] = round(time.monotonic() - t0, 1)
            self._save()
        return self.report

    def _placements(self, groups: list[list[str]]) -> dict[str, devices.Placement]:
        """Every server's GPU and memory flags, decided (or refused) before any server starts."""
        cfg = self.cfg
        inv = devices.inventory(cfg.gpus, os.environ, devices.detect())
        operator_args = shlex.split(cfg.server_args) + shlex.split(cfg.command)
        out: dict[str, devices.Placement] = {}
        for group in groups:
            out.update(devices.place(group, inv, os.environ, cfg.kv_cache_bytes, cfg.model, operator_args))
        if inv.gpus:
            self.say(f"GPUs ({inv.source}): " + ", ".join(g.id for g in inv.gpus))
        return out

    def _save(self) -> None:
        order = {label: i for i, label in enumerate(self.labels())}
        self.report["rows"].sort(key=lambda r: order.get(r.get("label", r["mode"]), len(order)))
        rep.finish(self.report)
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

    # --- one group of servers side by side ----------------------------------------------------------------------
    def _group(self, group: list[str], placements: dict[str, devices.Placement], labels: list[str]) -> None:
        runs = [self._new_run(label, labels) for label in group]
        self.runs = runs
        pool = ThreadPoolExecutor(len(runs), thread_name_prefix="qualify")
        try:
            futures: dict[Future[None], ModeRun] = {}
            notes = {placements[label].note for label in group}
            shared = len(notes) == 1
            if shared and notes != self._said:  # said once while it stays the same
                self.say(("side by side: " if len(group) > 1 else "") + next(iter(notes)))
                self._said = notes
            for run in runs:  # launched from the main thread: the children die with qualify (processes.py)
                if self._launch(run, placements[run.label], len(runs) > 1, note=not shared):
                    futures[pool.submit(self._prepare, run)] = run
            self._follow(futures, runs)
            self._throughput(runs)
        except BaseException as e:
            self.abort.set()  # workers stop at their next phase; their rows stay as they are
            if isinstance(e, KeyboardInterrupt):
                for run in runs:
                    if not run.finished:
                        run.row["status"], run.row["reason"] = "interrupted", "Ctrl-C"
            raise
        finally:
            self._stop_all(runs)
            pool.shutdown(wait=False, cancel_futures=True)
            for run in runs:
                self._keep(run.row)

    def _new_run(self, label: str, labels: list[str]) -> ModeRun:
        tag = f"[{labels.index(label) + 1}/{len(labels)} {label}]"
        row = self._row(label, status="error")
        return ModeRun(label, label == self.cfg.reference, _tagged(self.say, tag), row)

    def _launch(self, run: ModeRun, placement: devices.Placement, side_by_side: bool, note: bool) -> bool:
        cfg = self.cfg
        port = cfg.port or free_port(cfg.host)
        gpu = placement.gpu.id if placement.gpu else ""
        argv = template.expand(cfg.command, run.label, port, cfg.model, cfg.served_model_name, cfg.server_args, gpu)
        argv += placement.args
        log_path = self.workdir / "logs" / f"{run.label}.log"
        env = dict(self.env)
        if side_by_side:  # no two servers write one compile cache at once
            env.update(server_env(self.workdir / "cache" / run.label))
        env.update(placement.env)
        env.update(self.extra_env)  # the operator's --env has the last word
        mode = "NONE" if run.label == template.EAGER else run.label
        run.row.update(command=shlex.join(argv), log=str(log_path.relative_to(self.workdir)))
        if placement.gpu is not None or placement.args:
            run.row["placement"] = {"gpu": gpu or None, "env": placement.env, "args": placement.args}
        run.say(f"starting: {shlex.join(argv)}" + (f" ({placement.note})" if note else ""))
        run.server = ModeServer(run.label, argv, log_path, env, f"http://{cfg.host}:{port}", mode)
        run.state = "starting"
        try:
            run.server.launch()
        except StartFailed as e:
            self._failed(run, "start_failed", str(e), "did not start")
            return False
        return True

    def _failed(self, run: ModeRun, status: str, reason: str, said: str) -> None:
        if self.abort.is_set():
            return  # interrupted: the row says so, and the main thread stops the server
        run.row["status"], run.row["reason"] = status, reason
        if status in ("start_failed", "crashed") and run.server is not None:  # what the log said last, for people
            run.row["log_tail"] = run.server.process.log_tail(LOG_TAIL_LINES)[-4000:]
        run.state = "failed"
        run.say(f"{said}: {reason}")
        self._finish(run)

    def _follow(self, futures: dict[Future[None], ModeRun], runs: list[ModeRun]) -> None:
        """Wait for every server's start and comparisons, saying every PROGRESS_EVERY s where each one is."""
        pending = set(futures)
        t0 = time.monotonic()
        next_line = t0 + PROGRESS_EVERY
        while pending:
            done, pending = wait(pending, timeout=max(0.1, next_line - time.monotonic()), return_when=FIRST_COMPLETED)
            for f in done:
                f.result()  # a bug in a worker surfaces here, not silently
            if pending and time.monotonic() >= next_line:
                self._progress(runs, time.monotonic() - t0)
                next_line = time.monotonic() + PROGRESS_EVERY

    def _progress(self, runs: list[ModeRun], elapsed: float) -> None:
        def state(run: ModeRun) -> str:
            if run.state == "starting" and run.server is not None:
                return run.server.log.progress()
            return run.state

        if len(runs) == 1:
            if runs[0].state == "starting":
                runs[0].say(f"starting, {elapsed:.0f} s: {state(runs[0])}")
            return
        ready = sum(1 for r in runs if r.server is not None and r.server.ready_seconds)
        self.say(f"{elapsed:.0f} s, {ready}/{len(runs)} ready: " + "; ".join(f"{r.label} {state(r)}" for r in runs))

    def _check_abort(self) -> None:
        if self.abort.is_set():
            raise Aborted

    def _prepare(self, run: ModeRun) -> None:
        """Worker: wait for the server, then compare its answers and run the canary."""
        server = run.server
        assert server is not None
        try:
            server.wait_ready(self.cfg.startup_timeout)
            self._check_abort()
            run.row["ready_s"] = round(server.ready_seconds, 1)
            f = server.log.facts()
            run.say(
                f"ready in {server.ready_seconds:.1f} s: effective {f['effective_mode']}"
                + (
                    f", {sum(f['graphs'].values())} graphs, capture {f['capture_s']:.0f} s / {f['capture_gib']:.2f} GiB"
                    if f["capture_finished"]
                    else ""
                )
            )
            if not run.is_reference:
                run.state = "waiting for the reference"
                self._wait_for(self.reference_answered)
                if self.reference is None:
                    self._failed(run, "skipped", "the reference did not finish", "skipped")
                    return
            run.state = "comparing"
            self._correctness(run, server)
            run.measurable = True
            run.state = "compared"
        except StartFailed as e:
            self._failed(run, "start_failed", str(e), "did not start")
        except (RequestFailed, CanaryError, NoReference) as e:
            status, reason = "error", str(e)
            if not server.alive():
                status, reason = "crashed", f"{e}; server exited: {why_it_failed(server.process.log_tail(60))}"
            self._failed(run, status, reason, "stopped early")
        except Aborted:
            pass
        finally:
            if run.is_reference:
                self.reference_answered.set()
                self.baseline_recorded.set()

    def _wait_for(self, event: threading.Event) -> None:
        while not event.wait(0.5):
            self._check_abort()
        self._check_abort()

    def _correctness(self, run: ModeRun, server: ModeServer) -> None:
        cfg = self.cfg
        row = run.row
        run.client = client = Client(server.base_url, cfg.served_model_name, cfg.request_timeout)
        say = run.say
        if run.is_reference:
            plan = shapes.plan(client, cfg, client.max_model_len())
            say(f"reference prompts: {sum(len(v) for v in plan.values())} requests in {len(plan)} shapes")
        else:
            assert self.reference is not None
            plan = {
                k: [shapes.Req(r["prompt"], r["max_tokens"]) for r in v] for k, v in self.reference["shapes"].items()
            }
        outputs = shapes.run(client, plan, cfg, say)
        self._check_abort()
        # Kept beside the report (not in it) so that answers can be looked at, or compared again, later.
        (self.workdir / "outputs").mkdir(exist_ok=True)
        (self.workdir / "outputs" / f"{row['label']}.json").write_text(
            json.dumps({k: [o.to_json() for o in v] for k, v in outputs.items()})
        )
        if run.is_reference:
            self._keep_reference(client, server.base_url, plan, outputs, row, say)
        else:
            assert self.reference is not None
            ref = {k: [Output.from_json(r["output"]) for r in v] for k, v in self.reference["shapes"].items()}
            row["agreement"] = {k: compare_shape(ref[k], outputs[k], cfg.tolerance) for k in plan}
            bad = [k for k, v in row["agreement"].items() if not v["ok"]]
            say("agreement: " + (f"FAILED in {', '.join(bad)}" if bad else "every shape agrees"))
            run.state = "waiting for the baseline"
            self._wait_for(self.baseline_recorded)
            if self.report.get("baseline") is None:
                raise NoReference("the reference recorded no canary baseline")
        run.state = "canary"
        row["canary"] = self._canary(server.base_url)
        say(f"canary: {row['canary']['outcome']}: {row['canary']['reason']}")

    # --- throughput ---------------------------------------------------------------------------------------------
    def _throughput(self, runs: list[ModeRun]) -> None:
        """Rounds across the modes, one mode at a time: round r in order, the next reversed."""
        cfg = self.cfg
        measured = [r for r in runs if r.measurable]
        for i in range(cfg.rounds):
            for run in measured if i % 2 == 0 else measured[::-1]:
                if run.finished or (i > 0 and rep.wrong_answers(run.row)):
                    continue  # failed, or wrong already: it cannot be recommended, one round is for the table
                self._round(run, i)
        for run in measured:
            if run.finished:
                continue
            run.row["throughput"] = combine(run.rounds)
            run.row["status"] = "ok"
            assert run.server is not None
            if not run.server.alive():
                run.row["status"] = "crashed"
                run.row["reason"] = f"server exited: {why_it_failed(run.server.process.log_tail(60))}"
            self._finish(run)

    def _round(self, run: ModeRun, i: int) -> None:
        cfg = self.cfg
        assert run.client is not None and run.server is not None and self.reference is not None
        run.state = f"throughput round {i + 1}"
        try:
            tp = measure(
                run.client, self.reference["tp_prompt"], cfg.concurrency, cfg.tp_tokens, cfg.tp_rounds, run.say
            )
        except RequestFailed as e:
            status, reason = "error", f"throughput: {e}"
            if not run.server.alive():
                status, reason = "crashed", f"{reason}; server exited: {why_it_failed(run.server.process.log_tail(60))}"
            run.row["throughput"] = combine(run.rounds)
            self._failed(run, status, reason, "stopped early")
            return
        run.rounds.append(tp)
        levels = "/".join(tp)
        run.say(
            f"throughput round {i + 1}/{cfg.rounds}: "
            + " / ".join(f"{v['tok_s']:,.0f}" for v in tp.values())
            + f" tok/s at {levels} clients"
        )

    # --- stopping -------------------------------------------------------------------------------------------------
    def _finish(self, run: ModeRun) -> None:
        """Read the log's facts, stop the server, judge the row (once; from any thread)."""
        with run.lock:
            if run.finished:
                return
            run.finished = True
            server = run.server
            if server is not None:
                server.log.poll()
                # before stopping: shutdown noise is not the start-up's; replay parses the same bytes
                run.row.update(server.log.facts(), log_bytes=server.log.consumed)
                code = server.stop()
                run.say(f"stopped (exit {code})")
            if run.client is not None:
                run.client.close()
            row = run.row
            if run.is_reference and row["status"] == "ok":
                self.report["vllm_version"] = row.get("vllm_version", "")
            row["verdict"], row["verdict_reason"] = rep.verdict(row)
            run.say(f"verdict: {row['verdict']}" + (f": {row['verdict_reason']}" if row["verdict_reason"] else ""))

    def _stop_all(self, runs: list[ModeRun]) -> None:
        """Every server of the group, stopped at once (each takes seconds to shut down cleanly)."""
        threads = [threading.Thread(target=self._finish, args=(run,)) for run in runs if not run.finished]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def stop_servers(self) -> None:
        self.abort.set()
        for run in self.runs:
            if run.server is not None:
                run.server.stop()

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
        self.reference_answered.set()  # the other modes may send the same requests now
        canary = CanaryConfig(num_problems=cfg.canary_problems, timeout=cfg.request_timeout)
        base = record_baseline(
            canary, base_url, cfg.served_model_name, notes=f"qualify reference {row['label']}: {cfg.model}"
        )
        base.save(self.workdir / BASELINE_FILE)
        self.report["baseline"] = dataclasses.asdict(base)
        self.baseline_recorded.set()
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
