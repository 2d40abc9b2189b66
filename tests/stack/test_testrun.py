"""`make test`'s runner (vllm_rocm_stack.testrun) with stand-in setup scripts and a tiny test tree: the Kubernetes build
runs in the background holding its lock while the tests run, the cluster tests' wait (vllm_rocm_stack.kube_build) waits
for exactly that lock, any failing part fails the run, and a failed setup stops what was started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from vllm_rocm_stack import kube_build, testrun

CONFIG = str(testrun.REPO / "pyproject.toml")  # the tiny trees live outside the checkout; its settings still apply


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    lock = work / "kube" / ".build.lock"
    monkeypatch.setattr(testrun, "WORK", work)
    monkeypatch.setattr(testrun, "KUBE_LOCK", lock)
    # Not the checkout's own session directories: this may run inside `make test`, whose sessions use them.
    monkeypatch.setattr(testrun, "basetemp", lambda name: tmp_path / "basetemp" / name)
    (tmp_path / "tree").mkdir()
    return tmp_path


def script(path: Path, body: str) -> list[str]:
    path.write_text("set -euo pipefail\n" + textwrap.dedent(body))
    return ["bash", str(path)]


def build_script(
    fake: Path, seconds: float, rc: int = 0, on_int: Path | None = None, until: Path | None = None
) -> list[str]:
    """Takes the lock as tools/kube/build.sh does, works `seconds` (or, with `until`, until that file exists: at
    most 600 s), writes its pid, exits rc; with `on_int`, writes that file when interrupted (bash cannot trap a
    signal it was started with ignored)."""
    lock = fake / "work" / "kube" / ".build.lock"
    trap = f"trap 'echo int > {on_int}; exit 130' INT\n" if on_int else ""
    work = f"sleep {seconds}"
    if until is not None:
        work = f"for _ in $(seq 12000); do [ -e {until} ] && break; sleep 0.05; done"
    return script(
        fake / "build.sh",
        trap
        + f"""
        mkdir -p {lock.parent}
        exec 9>{lock}
        flock 9
        echo $$ > {fake}/build.pid
        {work}
        echo built > {fake}/built
        exit {rc}
        """,
    )


def tree(fake: Path, test_body: str) -> str:
    path = fake / "tree" / "test_tiny.py"
    path.write_text(textwrap.dedent(test_body))
    return str(path)


def test_the_tests_wait_for_the_build_they_run_beside(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The build works until the test has looked (not for a time: a loaded machine starts pytest late).
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 0, until=fake / "looked"))
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", "echo venv ready\n"))
    # The test runs while the build holds the lock; kube_build.wait returns only after the build wrote its output.
    test = tree(
        fake,
        f"""
        from pathlib import Path
        from vllm_rocm_stack import kube_build

        def test_waits():
            assert not Path({str(fake / "built")!r}).exists()
            Path({str(fake / "looked")!r}).touch()
            kube_build.wait(Path({str(fake / "work" / "kube" / ".build.lock")!r}), 60)
            assert Path({str(fake / "built")!r}).read_text() == "built\\n"
        """,
    )
    assert testrun.run([test, "-q", "-c", CONFIG]) == 0
    assert "1 passed" in (fake / "work" / "tmp" / "pytest-pytest.log").read_text()


def test_the_sessions_temp_directories_are_outside_the_checkout_and_made(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 0))
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", "true\n"))
    test = tree(fake, "def test_tmp(tmp_path):\n    (tmp_path / 'x').write_text('y')\n")
    assert testrun.run([test, "-q", "-c", CONFIG]) == 0  # pytest makes basetemp, not its parents: the run must
    assert (fake / "basetemp" / "pytest").is_dir()
    monkeypatch.undo()
    assert not testrun.basetemp("main").is_relative_to(testrun.REPO)


def test_a_failing_build_fails_the_run(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 0, rc=3))
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", "true\n"))
    test = tree(fake, "def test_ok():\n    pass\n")
    assert testrun.run([test, "-q", "-c", CONFIG]) == 1


def test_a_failing_test_fails_the_run(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 0))
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", "true\n"))
    test = tree(fake, "def test_bad():\n    assert False\n")
    assert testrun.run([test, "-q", "-c", CONFIG]) == 1


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_failed_vllm_setup_stops_the_build(fake: Path, monkeypatch: pytest.MonkeyPatch, sigint: str) -> None:
    """The build is interrupted (SIGINT, so that a pytest session would run its teardown), also when this process
    was started with SIGINT ignored (a background job of a shell), which children inherit."""
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 600, on_int=fake / "interrupted"))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if sigint == "ignored" else None
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", "echo no index >&2; exit 1\n"))
    test = tree(fake, "def test_ok():\n    pass\n")
    try:
        assert testrun.run([test, "-q", "-c", CONFIG]) == 1
        if previous is not None:
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # left as it found it
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    pid = int((fake / "build.pid").read_text())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the build (pid {pid}) still runs after the failed setup")
    assert (fake / "interrupted").exists(), "the build was killed, not interrupted"
    assert not (fake / "built").exists()
    assert not (fake / "work" / "tmp" / "pytest-pytest.log").exists()  # no tests started


def split_run(fake: Path, monkeypatch: pytest.MonkeyPatch, standins_rc: int) -> int:
    """A whole `make test` (no pytest arguments) whose sessions pass at once, with the vLLM setup waiting until the
    stand-in bases are being made (at most 60 s): it passes only if they are made beside it, not after it."""
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 0))
    started = fake / "standins-started"
    wait = f"for _ in $(seq 1200); do [ -e {started} ] && exit 0; sleep 0.05; done; exit 1\n"
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", wait))
    monkeypatch.setattr(testrun, "IMAGES_SETUP", script(fake / "standins.sh", f"touch {started}\nexit {standins_rc}\n"))
    monkeypatch.setattr(testrun, "pytest_part", lambda name, _args: testrun.Part(name, ["true"], fake / f"{name}.log"))
    return testrun.run(None)


def test_the_stand_in_bases_are_made_beside_the_vllm_setup(
    fake: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert split_run(fake, monkeypatch, 0) == 0
    out, err = capsys.readouterr()
    assert "[setup-images] exit 0" in out and "stand-in bases ahead" not in err


def test_stand_in_bases_that_failed_ahead_are_said_not_the_verdict(
    fake: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a cache: the system session's build makes them again or fails saying why."""
    assert split_run(fake, monkeypatch, 3) == 0
    err = capsys.readouterr().err
    assert "making the stand-in bases ahead failed (3;" in err and "setup-images.log" in err, err


def test_wait_for_build_times_out_with_a_reason(fake: Path) -> None:
    import fcntl

    lock = fake / "work" / "kube" / ".build.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assert kube_build.running(lock)
        with pytest.raises(TimeoutError, match="still runs"):
            kube_build.wait(lock, timeout=0.5)
    assert not kube_build.running(lock)
    kube_build.wait(lock, timeout=0.5)  # released: returns at once


def test_the_summary_keeps_the_reason_a_failure_gives_on_its_next_lines(fake: Path) -> None:
    """The summary at the end of `make test` is what CI shows of a failed run: a failed fixture's reason that pytest
    prints on the lines after the ERROR line must be in it (it once showed only the line with " failed")."""
    test = tree(
        fake,
        """
        import pytest

        @pytest.fixture(scope="module")
        def image():
            pytest.fail("build failed (1):\\nError: committing container: no space left on device", pytrace=False)

        def test_a(image):
            pass

        def test_b():
            pass
        """,
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            test,
            "-q",
            "-c",
            CONFIG,
            "-p",
            "no:cacheprovider",
            f"--basetemp={fake / 't'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CI": "true"},  # as on CI, where pytest prints a failure's message whole
    )
    assert proc.returncode == 1, proc.stdout
    lines = testrun.summary(proc.stdout.splitlines(keepends=True)[-testrun.TAIL :])
    assert any(line.startswith("ERROR") and "test_a" in line for line in lines), lines
    assert any("no space left on device" in line for line in lines), lines
    assert "1 passed, 1 error" in lines[-1]


def test_the_summary_of_a_long_failure_list_is_cut_but_keeps_its_counts() -> None:
    tail = ["collected 500 items\n", "=== short test summary info ===\n"]
    for i in range(60):
        tail += [f"FAILED t.py::test_{i} - boom\n"] + [f"log line {j}\n" for j in range(10)]
    tail += ["=== 60 failed in 1.00s ===\n"]
    lines = testrun.summary(tail)
    per_entry = testrun.ENTRY_LINES + 1
    assert len(lines) == testrun.SUMMARY_ENTRIES * per_entry + 2
    assert lines[:per_entry] == ["FAILED t.py::test_0 - boom", "log line 0", "log line 1", "log line 2",
                                 "    ... 7 more lines"]  # fmt: skip
    assert lines[-2:] == ["... 20 more", "=== 60 failed in 1.00s ==="]


def test_the_disk_watch_reports_the_lowest_free_space_it_saw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gb = 10**9
    free = iter([30 * gb, 20 * gb, 5 * gb, 25 * gb])
    seen: list[int] = []

    def usage(path: object) -> shutil._ntuple_diskusage:
        seen.append(next(free, 26 * gb))
        return shutil._ntuple_diskusage(100 * gb, 0, seen[-1])

    monkeypatch.setattr(testrun.shutil, "disk_usage", usage)
    real = testrun.mem_available()  # read from /proc/meminfo
    assert real is None or real > 0
    mems = iter([9 * gb, 7 * gb, 3 * gb, 8 * gb])
    monkeypatch.setattr(testrun, "mem_available", lambda: next(mems, 8 * gb))
    watch = testrun.ResourceWatch(tmp_path / "not" / "made", every=0.01)
    deadline = time.monotonic() + 30
    while len(seen) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    report = watch.report()
    assert watch.path == tmp_path  # the nearest existing directory: the filesystem WORK will be made on
    assert "30.0 GB free at the start, lowest 5.0 GB" in report and "26.0 GB at the end" in report
    assert "memory: lowest 3.0 GB available" in report, report


def test_the_watch_says_where_the_machines_cpu_went(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = iter([(100.0, 1000.0), (700.0, 1060.0)])
    monkeypatch.setattr(testrun, "machine_cpu", lambda: next(reads))
    watch = testrun.ResourceWatch(tmp_path, every=60)
    report = watch.cpu(300.0)
    watch.report()
    assert "busy 10.0 of 11.0 CPU-min (idle 1.0)" in report, report
    assert "took 5.0, the rest 5.0" in report, report
    monkeypatch.setattr(testrun, "machine_cpu", lambda: None)
    blind = testrun.ResourceWatch(tmp_path, every=60)
    assert "not readable" in blind.cpu(1.0)
    blind.report()


def test_the_watch_says_how_long_the_run_waited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pressure stall minutes over the run, each from two readings; none claimed where the kernel keeps none."""
    start = {"cpu": 10.0, "io": 100.0, "io full": 50.0, "memory": 5.0, "memory full": 1.0}
    end = {"cpu": 130.0, "io": 400.0, "io full": 110.0, "memory": 65.0, "memory full": 7.0}
    reads = iter([start, end])
    monkeypatch.setattr(testrun, "machine_stalls", lambda: next(reads))
    watch = testrun.ResourceWatch(tmp_path, every=60)
    line = watch.waits()
    watch.report()
    assert "waited for a core 2.0 min, on I/O 5.0 (every one at once 1.0), for memory 1.0 (every one at once 0.1)" in (
        line
    ), line
    monkeypatch.setattr(testrun, "machine_stalls", lambda: None)
    blind = testrun.ResourceWatch(tmp_path, every=60)
    assert blind.waits() == "waits: /proc/pressure is not readable here"
    blind.report()


def test_each_part_says_the_cpu_time_it_and_its_children_took(
    fake: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CPU line counts what a part's children burnt: a setup whose child spins 2 s of CPU says at least that."""
    monkeypatch.setattr(testrun, "KUBE_BUILD", build_script(fake, 0))
    spin = f"{sys.executable} -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 2: pass\n'\n"
    monkeypatch.setattr(testrun, "VLLM_SETUP", script(fake / "vllm.sh", spin))
    test = tree(fake, "def test_ok():\n    pass\n")
    assert testrun.run([test, "-q", "-c", CONFIG]) == 0
    out = capsys.readouterr().out.splitlines()
    [line] = [line for line in out if line.startswith("[setup-vllm] exit 0")]
    cpu = float(line.split("; CPU ")[1].split(" s")[0])
    assert cpu >= 2, line
    # ... and the run's last lines say where the machine's CPU went, the parts' share counting that spin.
    [machine] = [line for line in out if line.startswith("make test: CPU: ")]
    parts = float(machine.split(" and what they waited for took ")[1].split(",")[0])
    assert parts >= 2 / 60, machine
    # ... and how long it waited, the last line.
    assert out[-1].startswith("make test: waits: "), out[-3:]


def test_a_part_says_it_ended_when_it_ends_not_when_it_is_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sessions are waited for one after the other; a session that ended early must say so then, with its own
    time (CI's report of 16fbd84 gave the integration session the system session's 29.3 min)."""
    release = tmp_path / "release"
    quick = testrun.Part("quick", ["true"], tmp_path / "quick.log").start()
    slow = testrun.Part(
        "slow", script(tmp_path / "slow.sh", f"while [ ! -e {release} ]; do sleep 0.05; done\n"), tmp_path / "s.log"
    ).start()
    try:
        while quick.running:  # observed, not timed: the slow part waits for the file
            time.sleep(0.01)
        assert slow.running
        release.touch()
        assert slow.wait() == 0 and quick.wait() == 0
    finally:
        slow.stop()
    lines = [line for line in capsys.readouterr().out.splitlines() if " exit 0 after " in line]
    assert [line.split()[0] for line in lines] == ["[quick]", "[slow]"], lines
    assert quick.ended is not None and slow.ended is not None and quick.ended < slow.ended


def test_stop_ends_a_running_part_and_reaps_it(tmp_path: Path) -> None:
    part = testrun.Part("sleeper", ["sleep", "600"], tmp_path / "sleeper.log").start()
    assert part.proc is not None
    part.stop()
    assert not part.running and part.proc.returncode == -signal.SIGINT
    with pytest.raises(ProcessLookupError):
        os.kill(part.proc.pid, 0)  # reaped, not a zombie


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="this kernel has no autogroup scheduling")
def test_a_part_gets_its_share_in_an_autogroup_of_its_own(tmp_path: Path) -> None:
    """A part's nice is its session's autogroup nice (what the kernel weighs sessions by), not the runner's: the
    runner's own autogroup is left as it was."""
    own = Path("/proc/self/autogroup").read_text()
    go = tmp_path / "go"  # the part looks once start() has returned: what it sees is then what it runs with
    look = f"while [ ! -e {go} ]; do sleep 0.05; done; cat /proc/self/autogroup"
    part = testrun.Part("weighed", ["sh", "-c", look], tmp_path / "weighed.log", nice=7).start()
    go.touch()
    assert part.wait() == 0
    group, nice = part.log.read_text().split()[0], part.log.read_text().split()[-1]
    assert nice == "7" and group != own.split()[0], part.log.read_text()
    assert Path("/proc/self/autogroup").read_text() == own


def test_a_refused_share_is_said_and_the_part_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Where the kernel refuses the nice (a negative one without CAP_SYS_NICE, or no autogroups), the part still runs,
    at an even share, and says so."""
    part = testrun.Part("refused", ["true"], tmp_path / "refused.log", nice=99)  # out of range: always refused
    assert part.start().wait() == 0
    assert "[refused] runs at an even share of the CPU (autogroup nice 99" in capsys.readouterr().out


@pytest.mark.parametrize(
    "markers",
    # As `-m` sees them: one tier each (tests/support/tiers.py gives an unmarked test `unit`, and refuses two).
    [
        {"unit"},
        {"integration"},
        {"system"},
        {"system", "host"},
        {"integration", "host"},
        {"unit", "host"},
        {"system", "cluster"},
    ],
    ids=lambda m: "+".join(sorted(m)),
)
def test_the_sessions_split_every_test_once(markers: set[str]) -> None:
    """Every test runs in exactly one session (none twice, none left out); a system test marked `host` runs with the
    integration tier, one marked `cluster` in the cluster session, and only the unit tier starts before the vLLM CPU
    setup."""
    from _pytest.mark.expression import Expression  # what `-m` evaluates

    chosen = [s for s in testrun.SESSIONS if Expression.compile(s[1]).evaluate(lambda m: m in markers)]
    assert len(chosen) == 1, (markers, chosen)
    name, _, after_setup = chosen[0]
    if markers == {"system", "host"}:
        assert name == "integration"
    if markers == {"system", "cluster"}:
        assert name == "cluster"
    assert after_setup == ("unit" not in markers)
