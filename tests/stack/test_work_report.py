"""vllm_rocm_stack.work_report, the script whose output the README quotes: disk per folder of WORK (disk usage, a
hard-linked file once), the Go caches, and the times a `make test` log holds."""

from __future__ import annotations

import os
from pathlib import Path

from vllm_rocm_stack import work_report

MB = 1_000_000
LOG = """\x1b[1m==>   kube-apiserver built in 254 s\x1b[0m
done in 38.2 s
============================= 2265 passed, 1 failed in 2706.12s (0:45:06) =============================
Command exited with non-zero status 1
918.21user 225.82system 57:48.00elapsed 33%CPU (0avgtext+0avgdata 1995896maxresident)k
rc=1
"""


def _file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))  # real blocks: du counts what is on disk


def test_the_log_gives_the_run_the_tests_and_the_setup_steps() -> None:
    t = work_report.parse_log(LOG)
    assert t.wall == 57 * 60 + 48 and t.tests == 2706.12 and t.tests_summary == "2265 passed, 1 failed"
    assert t.setup == t.wall - t.tests and t.rc == 1
    assert t.steps == [("kube-apiserver", 254.0), ("model conversion", 38.2)]
    # a run logged in parts adds up; GNU time -v's spelling too
    parts = work_report.parse_log(LOG + "\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03.5\n")
    assert parts.wall == t.wall + 3723.5


def test_a_log_without_times_says_so(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _file(work / "venv" / "a", MB)
    out = work_report.report(work, tmp_path / "no-go", [("x.log", work_report.parse_log("rc=2\n"))])
    assert "no wall-clock time in the log" in out and "did not run to the end" in out and "exit status 2" in out
    assert "Go caches" in out and "not there" in out


def test_disk_per_folder_counts_a_hard_linked_file_once(tmp_path: Path) -> None:
    work, go = tmp_path / "work", tmp_path / "go"
    _file(work / "vllm-venv" / "torch.so", 30 * MB)
    _file(work / "models" / "m.safetensors", 10 * MB)
    (work / "cache").mkdir()
    os.link(work / "vllm-venv" / "torch.so", work / "cache" / "torch.so")  # as image stores share layers
    _file(go / "build" / "x", 20 * MB)
    folders = sorted(p for p in work.iterdir())
    sizes = work_report.disk_usage(folders)
    total = work_report.disk_usage([work])[work]
    assert 40 * MB <= sum(sizes.values()) <= total < 41 * MB  # the 30 MB file once, in one of the two folders
    assert 10 * MB <= sizes[work / "models"] < 10.2 * MB
    out = work_report.report(work, go, []).splitlines()
    assert out[0] == f"WORK {work}: 0.0 GB on disk"
    assert [line.split()[0] for line in out[1:4]] == ["cache/", "models/", "vllm-venv/"]  # largest first
    assert f"Go caches {go} (outside the clone): 0.0 GB" in out
