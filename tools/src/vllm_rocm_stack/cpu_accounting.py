"""Where a run's CPU went: the kernel's process accounting (acct(2)) around a command, summed by command name.

On 2 shared cores the wall clock says little about a change, and `--durations` times tests, not what they start.
This counts every process that exits while accounting is on, containers and pods included, with its own user and
system time (not its children's): vLLM's engine and worker processes, Go's compiler, podman, helm, g++ under
torch's inductor. Measured this way on 2026-12-05, vLLM's processes took 45% of the CPU a fresh-clone run's own
processes used after its first 12 minutes, and `podman save`'s gzip of the node image 116 s.

    sudo python -m vllm_rocm_stack.cpu_accounting run --out acct.bin -- make test
    python -m vllm_rocm_stack.cpu_accounting report acct.bin [--top 30]

`run` needs root and a kernel with BSD process accounting (v3 records); it sets VLLM_ROCM_CPU_ACCOUNTING for the
command, and switches accounting off when the command ends, however it ends. Accounting is machine-wide: the file
holds the machine's other processes too, and a process still running at the end is not in it. On the 2-core machine
it stopped recording 23 min into two whole runs (44 and 45, 2026-12-07), when the single-node cluster started: for a
whole `make test`, `cpu_sampler` sees more.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ENV = "VLLM_ROCM_CPU_ACCOUNTING"  # set for the command `run` runs: the accounting file (nothing may switch it off)
# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float), utime,
# stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16].
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100  # the ticks of acct_v3's times
# Processes of one program under other names: vLLM's (its processes name themselves VLLM::..., and a worker exits
# named after the thread that ends last), the Go toolchain's and the C/C++ toolchain's (torch's inductor runs g++).
GROUPS = {
    "vLLM": ("VLLM::", "vllm", "pt_gloo_runloop", "gloo_tcp_loop", "ZMQbg/"),
    "go toolchain": ("compile", "link", "asm", "cgo", "go", "vet"),
    "gcc/g++": ("cc1plus", "cc1", "as", "ld", "collect2", "g++", "gcc", "c++"),
}


class AccountingError(Exception):
    pass


@dataclass(frozen=True)
class Record:
    command: str
    pid: int
    ppid: int
    started: int  # epoch seconds
    elapsed: float  # seconds
    user: float  # seconds
    system: float

    @property
    def cpu(self) -> float:
        return self.user + self.system


def comp_t(value: int) -> int:
    """acct's 16-bit float: a 13-bit mantissa and a base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def parse(data: bytes) -> list[Record]:
    if len(data) % RECORD.size:
        raise AccountingError(f"{len(data)} bytes is not a whole number of {RECORD.size}-byte acct_v3 records")
    out = []
    for offset in range(0, len(data), RECORD.size):
        f = RECORD.unpack_from(data, offset)
        if f[1] & 0x0F != 3:
            raise AccountingError(f"record {offset // RECORD.size}: version {f[1] & 0x0F}, not 3 (acct_v3)")
        out.append(
            Record(
                command=f[18].split(b"\0", 1)[0].decode(errors="replace"),
                pid=f[6],
                ppid=f[7],
                started=f[8],
                elapsed=f[9] / AHZ,
                user=comp_t(f[10]) / AHZ,
                system=comp_t(f[11]) / AHZ,
            )
        )
    return out


def group(command: str) -> str:
    for name, prefixes in GROUPS.items():
        if any(command == p or (p.endswith(("::", "/")) and command.startswith(p)) for p in prefixes):
            return name
    return command


def report(records: list[Record], top: int = 30) -> str:
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in records:
        entry = by[group(r.command)]
        entry[0] += 1
        entry[1] += r.cpu
    total = sum(cpu for _, cpu in by.values()) or 1.0
    lines = [f"{total / 60:.1f} CPU-min in {len(records)} processes", "  CPU-min  share  processes  command"]
    for name, (n, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {cpu / 60:7.2f}  {100 * cpu / total:4.0f}%  {int(n):9d}  {name}")
    return "\n".join(lines)


def _acct(path: Path | None) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.acct(None if path is None else os.fsencode(path)) != 0:
        err = ctypes.get_errno()
        raise AccountingError(f"acct({path}): {os.strerror(err)} (needs root and CONFIG_BSD_PROCESS_ACCT)")


def run(out: Path, argv: list[str]) -> int:
    if os.environ.get(ENV):
        raise AccountingError(f"accounting is already on for this run ({os.environ[ENV]}): one file at a time")
    if os.geteuid() != 0:
        raise AccountingError("process accounting needs root (acct(2))")
    out.write_bytes(b"")
    _acct(out.resolve())
    try:
        rc = subprocess.call(argv, env={**os.environ, ENV: str(out.resolve())})
    finally:
        _acct(None)
    print(report(parse(out.read_bytes())), file=sys.stderr)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a command with process accounting on, then report")
    r.add_argument("--out", type=Path, required=True, help="the accounting file to write (overwritten)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    p = sub.add_parser("report", help="CPU per command name from an accounting file")
    p.add_argument("file", type=Path)
    p.add_argument("--top", type=int, default=30, help="how many command names (default 30)")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "report":
            print(report(parse(a.file.read_bytes()), a.top))
            return 0
        command = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not command:
            ap.error("run: no command (give it after --)")
        return run(a.out, command)
    except (AccountingError, OSError) as e:
        print(f"cpu_accounting: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
