"""Where a run's CPU went, sampled: every process's own CPU (`/proc/<pid>/stat`, every few seconds), podman's
containers and the kubelet's pods whole (their cpuacct cgroups), set against the machine's busy time (`/proc/stat`).

Process accounting (`cpu_accounting`) hears of a process only when it ends, and on the 2-core machine it stopped
recording when the tests' single-node cluster started (runs 44 and 45, 23 min in). Sampling sees every long-lived
process while it runs: vLLM's servers wherever they run, the clusters' daemons, pytest, pip, buildah. What it misses
is a process that lives between two samples (the Go compiler's, helm's, the CLIs'): their CPU is the `short-lived`
row, the machine's busy time less everything sampled. Without root the containers' and pods' cgroups may be
unreadable; the report says what it could read.

    python -m vllm_rocm_stack.cpu_sampler run --out cpu.json [--every 5] -- make test
    python -m vllm_rocm_stack.cpu_sampler report cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

CGROUP_V1 = Path("/sys/fs/cgroup/cpuacct")
# The cgroups this project's containers and pods run in: podman's cgroupfs parent (tests/support, docker/), and each
# test node's kubelet root (tests/support/kube_node.py: cgroupRoot /vllm-rocm-kube-<pid>).
CONTAINERS, PODS = "libpod_parent", "vllm-rocm-kube-"
KERNEL = ("kworker", "ksoftirqd", "kswapd", "kcompactd", "kdamond", "rcu_", "migration", "khugepaged", "jbd2")
DAEMONS = (
    "kube-apiserver",
    "etcd",
    "kube-controller",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "containerd",
    "conmon",
    "podman",
)
COMPILERS = ("compile", "link", "asm", "cgo", "go", "cc1", "cc1plus", "ld", "as", "g++", "gcc")


def machine_cpu(stat: str | None = None) -> tuple[float, float] | None:
    """The machine's busy and idle CPU seconds since boot, all cores together, from /proc/stat's `cpu` line (busy:
    user, nice, system, irq, softirq, steal; idle: idle and iowait; guest time is inside user). None off Linux."""
    try:
        text = Path("/proc/stat").read_text() if stat is None else stat
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["cpu"]:
            ticks = ([int(v) for v in fields[1:9]] + [0] * 8)[:8]  # older kernels print fewer fields
            hz = os.sysconf("SC_CLK_TCK")
            user, nice, system, idle, iowait, irq, softirq, steal = ticks
            return (user + nice + system + irq + softirq + steal) / hz, (idle + iowait) / hz
    return None


PRESSURE = Path("/proc/pressure")
STALLS = ("cpu", "io", "io full", "memory", "memory full")


def machine_stalls(pressure: Path = PRESSURE) -> dict[str, float] | None:
    """The seconds since boot that tasks stalled (the kernel's pressure stall information): `cpu` (some task runnable
    but waiting for a core), `io` and `memory` (some task waiting on them), `io full` and `memory full` (every task
    that had work waiting at once). A busy neighbour hides a run's waits from /proc/stat, since it fills the idle
    time they leave; these count them still. Machine-wide: the neighbour's waits count too. None where the kernel
    does not keep them all (before 4.20, or psi=0), never a partial reading whose gaps would read as no wait."""
    stalls: dict[str, float] = {}
    try:
        for resource in ("cpu", "io", "memory"):
            for line in (pressure / resource).read_text().splitlines():
                kind, *fields = line.split()
                total = dict(f.split("=", 1) for f in fields)["total"]
                stalls[resource if kind == "some" else f"{resource} {kind}"] = int(total) / 1e6
    except (OSError, ValueError, KeyError):
        return None
    return stalls if all(k in stalls for k in STALLS) else None


def group(comm: str, cmd: str) -> str:
    """What a host process is, for the report."""
    exe = os.path.basename(cmd.split(" ", 1)[0]) if cmd else comm
    vllm_cli = exe == "vllm" or cmd.split(" ")[1:2] == ["/usr/local/bin/vllm"]
    if (
        comm.startswith(("VLLM::", "pt_gloo_runloop", "gloo_tcp_loop", "ZMQbg/"))
        or "vllm.entrypoints" in cmd
        or "vllm.model_executor.models.registry" in cmd
        or (vllm_cli and " serve " in cmd)
    ):
        return "vLLM servers on the host"
    if "vllm_rocm_health" in cmd or "vllm-rocm-health" in cmd:
        return "sidecars and canary CLIs on the host"
    if comm.startswith(KERNEL):
        return "kernel threads"
    if comm.startswith(DAEMONS) or exe.startswith(DAEMONS):
        return "cluster and container daemons"
    if " pytest" in cmd or "xdist" in cmd:
        return "pytest"
    if " pip " in f" {cmd} " or "pip-runner" in cmd or "/pip " in cmd:
        return "pip"
    if comm.startswith("buildah") or exe == "buildah":
        return "buildah"
    if comm in COMPILERS or exe in COMPILERS:
        return "compilers (what the sampler saw)"
    return f"other: {comm}"


def cgroup_usage(root: Path = CGROUP_V1) -> dict[str, float]:
    """CPU seconds of each container's and pod's cgroup below `root` (cgroup v1 cpuacct), by path."""
    out: dict[str, float] = {}
    for top in (p for p in root.iterdir() if p.is_dir() and (p.name == CONTAINERS or p.name.startswith(PODS))):
        for where, _, _ in os.walk(top):
            path = Path(where)
            try:
                out[str(path.relative_to(root))] = int((path / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                continue  # removed since the walk listed it, or no usage file
    return out


class Sampler:
    """Samples in a thread until `stop()`; `data()` is the JSON the report reads."""

    def __init__(self, every: float = 5.0, cgroups: Path = CGROUP_V1) -> None:
        self.every, self.cgroups = every, cgroups
        self.hz = os.sysconf("SC_CLK_TCK")
        self.procs: dict[str, dict[str, Any]] = {}
        self.cg: dict[str, float] = {}
        self.cg_first: dict[str, float] = {}
        self.cg_error = ""
        self.error = ""  # why sampling stopped before the command ended, if it did
        self.first = True
        self.t0 = time.monotonic()
        self.cpu0 = machine_cpu()
        self.cpu1: tuple[float, float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                self.sample()
                if self._stop.wait(self.every):
                    self.sample()
                    return
        except Exception as e:  # said in the report: a partial count must not read as a whole one
            self.error = f"{type(e).__name__}: {e}"

    def sample(self) -> None:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue  # ended between the listing and the read
            comm = stat[stat.find("(") + 1 : stat.rfind(")")]
            f = stat[stat.rfind(")") + 2 :].split()
            cpu, started = (int(f[11]) + int(f[12])) / self.hz, f[19]
            entry = self.procs.get(f"{d}:{started}")
            if entry is None:
                try:
                    cmd = Path(f"/proc/{d}/cmdline").read_bytes()[:300].replace(b"\0", b" ").decode(errors="replace")
                    cg = Path(f"/proc/{d}/cgroup").read_text()
                except OSError:
                    continue
                where = "pod" if "/kubepods" in cg else "container" if "/libpod-" in cg else "host"
                # A process that was there before the run counts from here; a later one from its start.
                entry = self.procs[f"{d}:{started}"] = {
                    "comm": comm,
                    "cmd": cmd.strip(),
                    "where": where,
                    "cpu0": cpu if self.first else 0.0,
                }
            entry["cpu"] = cpu
            entry["comm"] = comm  # vLLM's processes rename themselves after they start
        try:
            for path, used in cgroup_usage(self.cgroups).items():
                self.cg[path] = max(self.cg.get(path, 0.0), used)
                self.cg_first.setdefault(path, used if self.first else 0.0)
        except OSError as e:
            self.cg_error = f"{self.cgroups}: {e}"
        self.first = False

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        self.cpu1 = machine_cpu()
        return self.data()

    def data(self) -> dict[str, Any]:
        return {
            "seconds": time.monotonic() - self.t0,
            "machine": [self.cpu0, self.cpu1],
            "procs": list(self.procs.values()),
            "cgroups": {k: [self.cg_first[k], v] for k, v in self.cg.items()},
            "cgroup_error": self.cg_error,
            "error": self.error,
        }


def report(data: dict[str, Any]) -> str:
    by: dict[str, float] = defaultdict(float)
    for p in data["procs"]:
        if p["where"] == "host":  # the containers' and pods' processes count whole, by their cgroups
            by[group(p["comm"], p["cmd"])] += p["cpu"] - p["cpu0"]
    cg = data["cgroups"]

    def whole(prefix: str, depth: int) -> float:
        return sum(b - a for k, (a, b) in cg.items() if k.startswith(prefix) and k.count("/") == depth)

    by["podman's containers (their cgroups)"] += whole(f"{CONTAINERS}/libpod-", 1)
    by["pods (the kubelets' cgroups)"] += whole(PODS, 0)
    sampled = sum(by.values())
    lines = []
    start, end = data["machine"]
    if start and end:
        busy, idle = end[0] - start[0], end[1] - start[1]
        by["short-lived processes (between samples: busy less all sampled)"] = max(0.0, busy - sampled)
        lines.append(
            f"the machine: busy {busy / 60:.1f} of {(busy + idle) / 60:.1f} CPU-min over "
            f"{data['seconds'] / 60:.1f} min (idle {idle / 60:.1f})"
        )
    else:
        lines.append("the machine: /proc/stat was not readable; the sampled processes only")
    if data.get("error"):
        lines.append(f"sampling stopped before the command ended ({data['error']}): the counts are partial")
    if data.get("cgroup_error"):
        lines.append(f"containers and pods not counted: {data['cgroup_error']}")
    # Groups under 0.05 CPU-min each are one row, so that the rows still add up to what the machine did.
    small = {name: cpu for name, cpu in by.items() if cpu < 0.05 * 60 and not name.startswith("short")}
    rows = {name: cpu for name, cpu in by.items() if name not in small}
    if small:
        rows[f"{len(small)} smaller groups"] = sum(small.values())
    lines.append("  CPU-min  what")
    lines += [f"  {cpu / 60:7.1f}  {name}" for name, cpu in sorted(rows.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a command while sampling, write the samples, then report")
    r.add_argument("--out", type=Path, required=True, help="the JSON file to write (overwritten)")
    r.add_argument("--every", type=float, default=5.0, help="seconds between samples (default 5)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    p = sub.add_parser("report", help="the report of a samples file")
    p.add_argument("file", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "report":
        try:
            print(report(json.loads(a.file.read_text())))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"cpu_sampler: {a.file}: not a samples file ({e})", file=sys.stderr)
            return 2
        return 0
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        ap.error("run: no command (give it after --)")
    if not 0.1 <= a.every <= 60:
        ap.error("--every: between 0.1 and 60 seconds")
    sampler = Sampler(a.every)
    try:
        rc = subprocess.call(command)
    except OSError as e:
        print(f"cpu_sampler: cannot run {command[0]}: {e}", file=sys.stderr)
        rc = 127
    finally:
        data = sampler.stop()
        a.out.write_text(json.dumps(data))
    print(report(data), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
