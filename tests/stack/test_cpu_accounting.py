"""The process-accounting report (vllm_rocm_stack.cpu_accounting): acct_v3 records as the kernel writes them, and a
real accounting run around a child that burns a known amount of CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from vllm_rocm_stack import cpu_accounting as acct


def record(comm: str, utime: int, stime: int = 0, version: int = 3) -> bytes:
    """One acct_v3 record, times in comp_t as the kernel encodes them."""
    return acct.RECORD.pack(0, version, 0, 0, 0, 0, 4242, 1, 1_796_470_000, 150.0, utime, stime, 0, 0, 0, 0, 0, 0,
                            comm.encode())  # fmt: skip


def test_comp_t_is_a_base_8_float() -> None:
    assert acct.comp_t(100) == 100
    assert acct.comp_t((2 << 13) | 3) == 3 * 64  # exponent 2: mantissa x 8^2
    assert acct.comp_t(0x1FFF | (7 << 13)) == 0x1FFF << 21


def test_records_parse_and_group_by_program() -> None:
    data = (
        record("VLLM::Worker", 3000, 500)  # 35 s
        + record("vllm", 1000)  # the API server in an image
        + record("pt_gloo_runloop", 1000)  # a worker whose last thread named it
        + record("compile", 200)
        + record("link", 100)
        + record("cc1plus", 600)
        + record("helm", 50)
        + record("VLLM::EngineCor", (1 << 13) | 125)  # 1000 ticks, exponent 1
    )
    records = acct.parse(data)
    assert [r.command for r in records][:2] == ["VLLM::Worker", "vllm"]
    assert records[0].user == 30.0 and records[0].system == 5.0 and records[0].cpu == 35.0
    assert records[0].elapsed == 1.5 and records[0].pid == 4242
    assert records[-1].user == 10.0
    text = acct.report(records)
    lines = text.splitlines()
    assert lines[0].startswith("1.2 CPU-min in 8 processes"), text  # 74.5 s
    assert lines[2].split()[-1] == "vLLM" and lines[2].split()[-2] == "4", text  # the most first
    assert [line.split(maxsplit=3)[-1] for line in lines[3:]] == ["gcc/g++", "go toolchain", "helm"], text


def test_a_truncated_file_or_another_version_is_refused() -> None:
    with pytest.raises(acct.AccountingError, match="whole number"):
        acct.parse(record("x", 1)[:-3])
    with pytest.raises(acct.AccountingError, match="version 2, not 3"):
        acct.parse(record("x", 1) + record("y", 1, version=2))


def test_report_reads_a_file_and_run_refuses_without_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "acct.bin"
    f.write_bytes(record("helm", 6000))
    assert acct.main(["report", str(f)]) == 0
    assert "1.0 CPU-min in 1 processes" in capsys.readouterr().out
    f.write_bytes(b"\0" * 10)
    assert acct.main(["report", str(f)]) == 2
    assert "whole number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        acct.main(["run", "--out", str(f), "--"])


def test_a_nested_run_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test inside `run -- make test` must not switch the outer accounting to its own file, or off."""
    monkeypatch.setenv(acct.ENV, "/elsewhere/acct.bin")
    assert acct.main(["run", "--out", str(tmp_path / "a"), "--", "true"]) == 2


def test_a_real_run_counts_its_childs_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Accounting is machine-wide: this switches it to its own file and off. Under `run` (ENV set) it would end the
    outer measurement, so it is skipped there; an `accton` of your own, which sets nothing, it ends too."""
    if os.environ.get(acct.ENV):
        pytest.skip(f"this session runs under process accounting ({os.environ[acct.ENV]}): one file at a time")
    if os.geteuid() != 0:
        pytest.skip("process accounting needs root")
    # The kernel records nothing while the file's filesystem has under 4% free when accounting starts (and pauses it
    # below 2%: kernel/acct.c; dmesg says "Process accounting resumed" when it starts recording). A fresh CI run fills
    # the disk: run 31 recorded nothing here with ~10 GB free of 252 GB. So the file goes to memory (tmpfs) if it can.
    shm = Path("/dev/shm")
    where = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    out = where / "acct.bin"
    # 2 s of CPU, where 1.4 is asked: the kernel charges acct's times by the tick, and beside two other pytest-xdist
    # workers on 2 cores it recorded 1.34 s for a 1.5 s spin (2026-12-07).
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.0: pass\n"
    try:
        try:
            rc = acct.run(out, [sys.executable, "-c", spin])
        except acct.AccountingError as e:
            if "Function not implemented" in str(e):
                pytest.skip(f"this kernel has no process accounting: {e}")
            raise
        assert rc == 0
        usage = shutil.disk_usage(where)
        mine = [r for r in acct.parse(out.read_bytes()) if r.command.startswith("python") and r.cpu >= 1.4]
        assert mine, f"{usage.free / usage.total:.1%} free on {where}: " + acct.report(acct.parse(out.read_bytes()))
        assert "CPU-min in" in capsys.readouterr().err
        # Off again: a process that exits now is not recorded.
        size = out.stat().st_size
        subprocess.run(["true"], check=True)
        assert out.stat().st_size == size
    finally:
        if where != tmp_path:
            shutil.rmtree(where, ignore_errors=True)
