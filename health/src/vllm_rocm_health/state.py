"""The state of one vLLM server's CUDA-graph start-up, built from log events. Pure: no I/O, no clock."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import logparse as lp
from .logline import LogLine
from .prefilter import Scanner, candidate_lines

# Processes whose pid is the engine's: a new pid under the same name is a new engine (vLLM's process prefixes).
_ENGINE_PROCS = ("EngineCore", "Worker", "VllmWorker")


@dataclass
class EngineState:
    """What is known about the current engine instance (reset at every engine (re)start)."""

    version: str = ""
    config_mode: str = "unknown"  # the mode of vLLM's engine config line (what it was asked, after config overrides)
    config_error: str = ""  # the engine config line did not read as vLLM's structure: no facts from it
    requested: str = "unknown"
    effective: str = "unknown"
    downgrade_warned: bool = False  # vLLM logged a downgrade warning
    bars_differ: bool = False  # the captured graphs show another mode than requested
    downgrade_reason: str = ""
    eager: bool = False
    skipped: bool = False
    kv_cache_seen: bool = False
    capture_finished: bool = False
    profile_passes: int = 0
    capture_seconds: float = 0.0
    capture_gib: float = 0.0
    bars: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (phase, mode) -> (done, total)
    graphs: dict[tuple[str, str], int] = field(default_factory=dict)  # of the final pass
    failures: set[str] = field(default_factory=set)
    current_bar: tuple[str, str] | None = None
    # What the known-issues data conditions on, as this engine's log shows it ("" / None: not seen)
    attention_backend: str = ""
    quantization: str = ""
    kv_cache_dtype: str = ""
    speculative_method: str = ""
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    max_num_seqs: int | None = None
    platform: str = ""
    architecture: str = ""  # the model's, as vLLM resolved it (`Resolved architecture:`)
    capture_pid: int | None = None  # pid of the process whose `Graph capturing finished` line counted
    shutting_down: bool = False  # vLLM logged `[shutdown]` for this engine: it is being stopped

    @property
    def progress(self) -> float:
        if self.capture_finished:
            return 1.0
        if self.current_bar is None:
            return 0.0
        done, total = self.bars.get(self.current_bar, (0, 0))
        return min(1.0, done / total) if total else 0.0

    @property
    def downgraded(self) -> bool:
        return self.downgrade_warned or self.bars_differ

    @property
    def runs_without_graphs(self) -> bool:
        return self.eager or self.skipped or self.effective == "NONE"


def modes_from_bars(bars: dict[tuple[str, str], int] | dict[tuple[str, str], tuple[int, int]], requested: str) -> str:
    """The cudagraph mode the capture bars of one pass show."""
    keys = set(bars)
    mixed_full = ("mixed", "FULL") in keys
    piecewise = any(m == "PIECEWISE" for _, m in keys)
    decode_full = ("decode", "FULL") in keys or ("unspecified", "FULL") in keys
    if mixed_full:
        return "FULL"
    if piecewise and decode_full:
        return "FULL_AND_PIECEWISE"
    if piecewise:
        return "PIECEWISE"
    if decode_full:
        # V2 bars have no phase: a lone FULL bar is FULL or FULL_DECODE_ONLY; trust the request if it is one of them.
        if ("unspecified", "FULL") in keys and requested in ("FULL", "FULL_DECODE_ONLY"):
            return requested
        return "FULL_DECODE_ONLY"
    return requested


def _may_profile_capture(version: str) -> bool:
    """Whether this release can run the V2 runner's profile-only capture (0.26 for dense models, default 0.30+).
    Older releases never do, so their `finished` line is final even if `Available KV cache memory` was missed."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return True  # unknown version (log joined mid-way): be conservative
    return (major, minor) >= (0, 26)


class LogState:
    """Folds the events of a log into the state of the engine it describes."""

    def __init__(self, requested_hint: str = "") -> None:
        self.requested_hint = requested_hint  # what the operator asked for, when the log does not say
        self.engine = EngineState(requested=requested_hint or "unknown", effective=requested_hint or "unknown")
        self.engines_seen = 0
        self.restarts = 0
        self.failures_total: dict[str, int] = {}
        self._args_requested = ""
        self._args_eager = False
        self._args_max_num_seqs: int | None = None
        self._args_architecture = ""
        self._fresh = False  # restart() already counted the engine whose config line comes next
        # The image entrypoint's facts line (patches, ROCm version, VLLM_ROCM_* env): one per container start,
        # so it outlives engine restarts within the container.
        self.image_facts: dict = {}
        # The API server's version line: what an excerpt without the engine config line still says (never a fact
        # the runtime rules use: those need the engine's own line).
        self.api_version = ""
        # Engine instances seen (a canary verdict belongs to one): every engine start, container restart, new
        # capture, changed engine-process pid, or an outage the sidecar reports through new_instance().
        self.instance = 0
        self.instance_reason = "no engine seen yet"
        self._pids: dict[str, int] = {}  # engine process name (`EngineCore_DP0`, `Worker_TP1`) -> pid

    def new_instance(self, reason: str) -> None:
        """Whatever was measured before no longer describes the server that answers now."""
        self.instance += 1
        self.instance_reason = reason

    def restart(self, container: bool = False) -> None:
        """A new engine instance (new config line, or `container=True`: the log source saw the container
        restart; the new container's config line then belongs to this restart and must not count again)."""
        self.new_instance("the vLLM container restarted" if container else "a new engine started")
        self._pids.clear()
        self.restarts += 1
        self._fresh = container
        self.engine = EngineState(
            requested=self.requested_hint or "unknown", effective=self.requested_hint or "unknown"
        )
        self._args_requested = ""
        self._args_eager = False
        self._args_max_num_seqs = None
        self._args_architecture = ""

    def feed(self, line: str) -> list[lp.Event]:
        return self.feed_parsed(*lp.parse(line))

    def feed_parsed(self, line: LogLine | None, events: list[lp.Event]) -> list[lp.Event]:
        """Apply what lp.parse() made of one line (the sidecar parses outside its lock, then applies under it)."""
        if line is not None and line.pid is not None and line.proc.startswith(_ENGINE_PROCS):
            known = self._pids.get(line.proc)
            starts = any(ev.kind == lp.ENGINE_START for ev in events)
            if known is not None and known != line.pid and not starts:
                self.new_instance(f"{line.proc} now runs as pid {line.pid} (was {known})")
            self._pids[line.proc] = line.pid
        for ev in events:
            self.apply(ev, line)
        return events

    def feed_block(self, block: bytes, scan: Scanner | None = None) -> int:
        """Feed a block of raw `\n`-separated lines at once (fast path for offline parsing; only the last line
        may lack its `\n`); returns its line count."""
        for line in candidate_lines(block, scan):
            self.feed(line)
        return block.count(b"\n") + (bool(block) and not block.endswith(b"\n"))

    def apply(self, ev: lp.Event, line: LogLine | None = None) -> None:
        e = self.engine
        k = ev.kind
        if k == lp.REQUESTED:
            # `non-default args` precede the engine line of the same start.
            self._args_requested = ev.mode
            e.requested = e.effective = ev.mode
        elif k == lp.ENGINE_START:
            if self.engines_seen and not self._fresh:
                args, eager, seqs = self._args_requested, self._args_eager, self._args_max_num_seqs
                arch = self._args_architecture
                self.restart()
                self._args_requested, self._args_eager, self._args_max_num_seqs = args, eager, seqs
                self._args_architecture = arch
            elif not self.engines_seen and not self._fresh:
                self.new_instance("engine started")
            self.engines_seen += 1
            self._fresh = False
            e = self.engine
            e.version = ev.text
            e.config_mode = ev.mode
            requested = self._args_requested or (ev.mode if ev.mode != "unknown" else "") or self.requested_hint
            e.requested = requested or "unknown"
            e.effective = e.requested
            if self._args_requested and ev.mode not in ("unknown", self._args_requested):
                # A config-stage override (pooling model, KV connector, DCP, ...) already changed the mode.
                e.effective = ev.mode
                e.downgrade_warned = True
                e.downgrade_reason = e.downgrade_reason or "config override"
            if self._args_eager:
                self._set_eager(e)
            e.max_num_seqs = self._args_max_num_seqs
            e.architecture = e.architecture or self._args_architecture
        elif k == lp.CONFIG_ERROR:
            e.config_error = ev.reason or "unreadable"
        elif k == lp.API_VERSION:
            self.api_version = ev.text
        elif k == lp.CONFIG:
            facts = json.loads(ev.text)
            e.quantization = facts.get("quantization", e.quantization)
            e.kv_cache_dtype = facts.get("kv_cache_dtype", e.kv_cache_dtype)
            e.speculative_method = facts.get("speculative_method", e.speculative_method)
            e.tensor_parallel_size = facts.get("tensor_parallel_size", e.tensor_parallel_size)
            e.pipeline_parallel_size = facts.get("pipeline_parallel_size", e.pipeline_parallel_size)
            e.data_parallel_size = facts.get("data_parallel_size", e.data_parallel_size)
        elif k == lp.PLATFORM:
            e.platform = ev.text
        elif k == lp.ARCHITECTURE:
            self._args_architecture = e.architecture = ev.text
        elif k == lp.ARGS:
            self._args_max_num_seqs = e.max_num_seqs = json.loads(ev.text).get("max_num_seqs")
        elif k == lp.BACKEND:
            if not e.attention_backend:  # the model's own; a drafter or encoder selects its backend later
                e.attention_backend = ev.text
        elif k == lp.FACTS:
            self.image_facts = json.loads(ev.text)
        elif k == lp.EAGER:
            if "--enforce-eager" in ev.text:
                self._args_eager = True
            self._set_eager(e)
        elif k == lp.PROFILED:
            # Resolved mode as the profiler sees it. FULL alone may be FULL or FULL_DECODE_ONLY: keep the request.
            if not (ev.mode == "FULL" and e.effective in ("FULL", "FULL_DECODE_ONLY")):
                e.effective = ev.mode
            e.bars_differ = e.requested != "unknown" and e.effective != e.requested
        elif k == lp.DOWNGRADE:
            if e.requested == "unknown" and ev.text:
                e.requested = ev.text
            e.effective = ev.mode
            e.downgrade_warned = e.effective != e.requested
            e.downgrade_reason = ev.reason
        elif k == lp.SKIPPED:
            e.skipped = True
            e.effective = "NONE"
        elif k == lp.KV_CACHE:
            e.kv_cache_seen = True
        elif k == lp.BAR:
            key = (ev.phase, ev.mode)
            prev = e.bars.get(key, (0, 0))
            e.bars[key] = (max(prev[0], ev.done), ev.total or prev[1])
            e.current_bar = key
            if e.capture_finished:
                # With TP>1 another rank's `finished` line can come before rank 0 has drawn all its bars.
                self._settle(e)
        elif k == lp.FINISHED:
            pid = line.pid if line is not None else None
            if e.capture_finished:
                # One line per TP worker: the first one counts. The same process finishing again captured anew
                # (e.g. after sleep mode): what was measured on the old graphs no longer holds.
                if pid is not None and pid == e.capture_pid:
                    self.new_instance("CUDA graphs were captured again")
                return
            if not e.kv_cache_seen and _may_profile_capture(e.version):
                # V2 runner (0.30+): a profile-only capture runs before the KV cache is sized. Not the real one.
                # Each TP worker logs the line; only rank 0 draws bars, so count a pass once per bar set.
                if e.bars:
                    e.profile_passes += 1
                e.bars.clear()
                e.current_bar = None
                return
            e.capture_finished = True
            e.capture_pid = pid
            e.capture_seconds = ev.seconds
            e.capture_gib = ev.gib
            self._settle(e)
        elif k == lp.SHUTDOWN:
            e.shutting_down = True
        elif k == lp.FAILURE:
            if e.capture_finished and ev.reason == "exception":
                return  # a traceback after start-up is a request error, not a capture failure
            if e.shutting_down and ev.reason == "exception":
                # 0.32 logs `AsyncLLM output_handler failed` with an EngineDeadError traceback on every clean stop
                # (SIGINT/SIGTERM); OOM and GPU errors still count, and the next engine start begins afresh.
                return
            if ev.reason not in e.failures:
                e.failures.add(ev.reason)
                self.failures_total[ev.reason] = self.failures_total.get(ev.reason, 0) + 1

    @staticmethod
    def _settle(e: EngineState) -> None:
        """Graphs and effective mode of the final pass, from its bars."""
        e.graphs = {key: total for key, (_, total) in e.bars.items()}
        if e.graphs:
            # The engine config line's mode (read by structure) settles what the bars cannot tell apart (a lone
            # FULL bar of the V2 runner); `non-default args` only when there is no engine line.
            asked = e.config_mode if e.config_mode in lp.MODES else e.requested
            seen = modes_from_bars(e.graphs, asked)
            e.bars_differ = e.requested != "unknown" and seen != e.requested
            e.effective = seen

    @staticmethod
    def _set_eager(e: EngineState) -> None:
        e.eager = True
        e.effective = "NONE"

    def facts_source(self) -> dict[str, str]:
        """Where the version and the requested mode came from: vLLM's engine config line, or (an excerpt without
        it) the API server's version line and `non-default args`, or the operator's hint."""
        e = self.engine
        version = "engine config line" if e.version else ("API server version line" if self.api_version else "")
        if self.engines_seen and e.config_mode != "unknown":
            requested = "non-default args" if self._args_requested else "engine config line"
        elif self._args_requested:
            requested = "non-default args"
        else:
            requested = "operator hint" if self.requested_hint else ""
        return {"vllm_version": version, "requested_mode": requested}

    def summary(self) -> dict:
        e = self.engine
        return {
            "vllm_version": e.version or self.api_version,
            "facts_source": self.facts_source(),
            "excerpt": not self.engines_seen and bool(self.api_version or self._args_requested),
            "config_error": e.config_error,
            "requested_mode": e.requested,
            "effective_mode": e.effective,
            "downgraded": e.downgraded,
            "downgrade_backend": e.downgrade_reason,
            "eager": e.eager,
            "capture_finished": e.capture_finished,
            "capture_seconds": e.capture_seconds,
            "capture_gib": e.capture_gib,
            "profile_passes": e.profile_passes,
            "graphs": {f"{p}/{m}": n for (p, m), n in sorted(e.graphs.items())},
            "progress": round(e.progress, 3),
            "failures": sorted(e.failures),
            "failures_total": dict(sorted(self.failures_total.items())),
            "engines_seen": self.engines_seen,
            "restarts": self.restarts,
            "attention_backend": e.attention_backend,
            "quantization": e.quantization,
            "kv_cache_dtype": e.kv_cache_dtype,
            "speculative_method": e.speculative_method,
            "tensor_parallel_size": e.tensor_parallel_size,
            "pipeline_parallel_size": e.pipeline_parallel_size,
            "data_parallel_size": e.data_parallel_size,
            "max_num_seqs": e.max_num_seqs,
            "platform": e.platform,
            "architecture": e.architecture,
            "config_mode": e.config_mode,
            "instance": self.instance,
            "image_facts": self.image_facts,
        }
