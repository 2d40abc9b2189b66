"""What a server's log says, through the sidecar's own parser (vllm_rocm_health.state), plus the capture sizes
from the engine's config line."""

from __future__ import annotations

import re
from pathlib import Path

from vllm_rocm_health.state import LogState

_SIZES = re.compile(r"""cudagraph_capture_sizes['"]?\s*:\s*\[([\d,\s]*)\]""")
# vLLM's API server says where it serves, after its socket is bound (0.20+: "Starting vLLM server on
# http://127.0.0.1:8000", vllm/entrypoints/launchers/api_server/entry.py in 0.32.0; up to 0.14: "Starting vLLM API
# server 0 on http://..."): the port it holds (inside a container, the container's port).
_SERVING = re.compile(r"\] Starting vLLM (?:API )?server(?: \d+)? on \S*?:(\d+)\b")
# Lines that say why a server did not start, most telling first.
_WHY = (re.compile(r"(\w*Error|\w*Exception): .+"), re.compile(r"error: .+", re.I))

# Row fields that come from the log (replay recomputes exactly these).
FIELDS = (
    "vllm_version",
    "requested_mode",
    "effective_mode",
    "downgraded",
    "downgrade_reason",
    "eager",
    "capture_finished",
    "capture_s",
    "capture_gib",
    "graphs",
    "capture_sizes",
    "log_failures",
    "profile_passes",
)


def serving_ports(text: str) -> set[int]:
    """The ports a server's log text says it serves on (vLLM's own line, _SERVING)."""
    return {int(m.group(1)) for m in _SERVING.finditer(text)}


class LogFollower:
    """Reads a growing log file and feeds each complete line to a LogState."""

    def __init__(self, path: Path, requested: str) -> None:
        self.path = path
        self.state = LogState(requested_hint=requested)
        self.capture_sizes: list[int] | None = None
        self.serving_on: set[int] = set()  # the ports the server's log says it serves on
        self._pos = 0
        self._partial = b""

    @property
    def consumed(self) -> int:
        """Bytes of complete lines parsed so far (replay parses exactly these)."""
        return self._pos - len(self._partial)

    def poll(self, limit: int | None = None) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read() if limit is None else f.read(max(0, limit - self._pos))
        except FileNotFoundError:
            return
        self._pos += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.state.feed(line)
            if "Starting vLLM" in line:
                self.serving_on |= serving_ports(line)
            if "Initializing a V1 LLM engine" in line:
                m = _SIZES.search(line)
                self.capture_sizes = [int(x) for x in m.group(1).replace(",", " ").split()] if m else None

    def finish(self) -> None:
        self.poll()
        if self._partial:
            self._partial += b"\n"
            self.poll()

    def progress(self) -> str:
        """One line on where start-up is."""
        e = self.state.engine
        if e.capture_finished:
            return f"captured ({e.capture_seconds:.0f} s, {e.capture_gib:.2f} GiB)"
        if e.current_bar is not None:
            done, total = e.bars.get(e.current_bar, (0, 0))
            phase, mode = e.current_bar
            return f"capturing {mode}{'' if phase == 'unspecified' else ' ' + phase} {done}/{total}"
        if e.kv_cache_seen:
            return "KV cache sized"
        if self.state.engines_seen:
            return "engine starting"
        return "launching"

    def facts(self) -> dict:
        s = self.state.summary()
        return {
            "vllm_version": s["vllm_version"],
            "requested_mode": s["requested_mode"],
            "effective_mode": s["effective_mode"],
            "downgraded": s["downgraded"],
            "downgrade_reason": s["downgrade_backend"],
            "eager": s["eager"],
            "capture_finished": s["capture_finished"],
            "capture_s": s["capture_seconds"],
            "capture_gib": s["capture_gib"],
            "graphs": s["graphs"],
            "capture_sizes": self.capture_sizes,
            "log_failures": s["failures"],
            "profile_passes": s["profile_passes"],
        }


def read_facts(path: Path, requested: str, limit: int | None = None) -> dict:
    """The facts of a recorded log, from its first `limit` bytes (what the live run had read) or all of it."""
    f = LogFollower(path, requested)
    if limit is None:
        f.finish()
    else:
        f.poll(limit)
    return f.facts()


def why_it_failed(text: str) -> str:
    """The last line of a log tail that names an error, else its last line."""
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    for pattern in _WHY:
        for line in reversed(lines):
            m = pattern.search(line)
            if m:
                return m.group(0)[:300]
    return lines[-1][:300] if lines else "no output"
