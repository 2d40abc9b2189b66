"""The sampled CPU report (vllm_rocm_stack.cpu_sampler): /proc/stat read right, a child's burnt CPU found by a real
run, the containers' and pods' cgroups counted whole once, and bad input refused."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from vllm_rocm_stack import cpu_sampler

MARK = "cpu-sampler-test-spin"


def test_machine_cpu_reads_busy_and_idle_from_proc_stat() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    stat = "cpu  100 20 30 400 50 6 7 8 9 10\ncpu0 50 10 15 200 25 3 3 4 4 5\nintr 1 2\n"
    assert cpu_sampler.machine_cpu(stat) == ((100 + 20 + 30 + 6 + 7 + 8) / hz, (400 + 50) / hz)  # guest is in user
    assert cpu_sampler.machine_cpu("intr 1 2\n") is None
    # The real file: what the machine did over ~0.3 s of this process spinning is counted, on all its cores.
    before, t0 = cpu_sampler.machine_cpu(), time.monotonic()
    while time.monotonic() - t0 < 0.3:
        pass
    after, wall = cpu_sampler.machine_cpu(), time.monotonic() - t0
    assert before is not None and after is not None
    busy, idle = after[0] - before[0], after[1] - before[1]
    assert busy > 0.1, (busy, idle)
    assert 0.5 * wall * (os.cpu_count() or 1) < busy + idle < 2 * wall * (os.cpu_count() or 1) + 0.1


def test_machine_stalls_reads_the_pressure_totals(tmp_path: Path) -> None:
    (tmp_path / "cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=3000000\n")
    (tmp_path / "io").write_text(
        "some avg10=1.00 avg60=2.00 avg300=3.00 total=12500000\nfull avg10=0.50 avg60=1.00 avg300=1.00 total=2000000\n"
    )
    (tmp_path / "memory").write_text(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=400000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=100000\n"
    )
    got = cpu_sampler.machine_stalls(tmp_path)
    assert got == {"cpu": 3.0, "io": 12.5, "io full": 2.0, "memory": 0.4, "memory full": 0.1}, got
    # A file of another shape, a missing line, or none, is no reading: never zeros that would say nothing waited.
    io = (tmp_path / "io").read_text()
    (tmp_path / "io").write_text(io.splitlines()[0] + "\n")
    assert cpu_sampler.machine_stalls(tmp_path) is None
    (tmp_path / "io").write_text(io)
    (tmp_path / "memory").write_text("some avg10=0.00\n")
    assert cpu_sampler.machine_stalls(tmp_path) is None
    assert cpu_sampler.machine_stalls(tmp_path / "absent") is None
    # This machine's: read where the kernel keeps them, and never going back.
    first = cpu_sampler.machine_stalls()
    if cpu_sampler.PRESSURE.is_dir():
        assert first is not None and {"cpu", "io", "io full", "memory", "memory full"} <= first.keys(), first
        second = cpu_sampler.machine_stalls()
        assert second is not None and all(second[k] >= v for k, v in first.items()), (first, second)


@pytest.mark.parametrize(
    ("comm", "cmd", "want"),
    [
        (
            "VLLM::Worker",
            "/v/bin/python -B -c from multiprocessing.spawn import spawn_main",
            "vLLM servers on the host",
        ),
        ("python", "/v/bin/python -m vllm.entrypoints.openai.api_server --model m", "vLLM servers on the host"),
        ("python", "/v/bin/python -m vllm.model_executor.models.registry", "vLLM servers on the host"),
        ("vllm", "/usr/bin/python3 /usr/local/bin/vllm serve /models/m --port 8000", "vLLM servers on the host"),
        ("python", "/usr/bin/python3 /usr/local/bin/vllm --version", "other: python"),
        (
            "python",
            "/w/venv/bin/python -m vllm_rocm_health serve --listen 0:9400",
            "sidecars and canary CLIs on the host",
        ),
        (
            "kube-apiserver",
            "/w/kube/bin/kube-apiserver --etcd-servers http://127.0.0.1:1",
            "cluster and container daemons",
        ),
        ("kworker/1:1H", "", "kernel threads"),
        ("python", "/w/venv/bin/python -m pytest -m unit", "pytest"),
        ("python", "/w/vllm-venv/bin/python -m pip install --no-deps x", "pip"),
        ("compile", "/go/pkg/tool/linux_amd64/compile -o _pkg_.a", "compilers (what the sampler saw)"),
        ("yes", "yes", "other: yes"),
    ],
)
def test_each_process_is_named_for_what_it_is(comm: str, cmd: str, want: str) -> None:
    assert cpu_sampler.group(comm, cmd) == want


def test_containers_and_pods_count_whole_once(tmp_path: Path) -> None:
    def usage(rel: str, seconds: float) -> None:
        (tmp_path / rel).mkdir(parents=True, exist_ok=True)
        (tmp_path / rel / "cpuacct.usage").write_text(f"{int(seconds * 1e9)}\n")

    usage("libpod_parent", 100)
    usage("libpod_parent/conmon", 7)  # podman's monitors: not a container
    usage("libpod_parent/libpod-aaa", 60)
    usage("libpod_parent/libpod-bbb", 30)
    usage("vllm-rocm-kube-42", 120)
    usage("vllm-rocm-kube-42/kubepods/burstable/pod1", 120)
    usage("system.slice", 999)  # not this project's
    (tmp_path / "vllm-rocm-kube-42" / "kubepods" / "broken").mkdir()  # no usage file: skipped
    read = cpu_sampler.cgroup_usage(tmp_path)
    assert read["libpod_parent/libpod-aaa"] == 60 and "system.slice" not in read
    data = {
        "seconds": 60.0,
        "machine": [[0.0, 0.0], [600.0, 120.0]],
        "procs": [
            {"comm": "yes", "cmd": "yes", "where": "host", "cpu0": 10.0, "cpu": 70.0},
            {"comm": "VLLM::Worker", "cmd": "", "where": "pod", "cpu0": 0.0, "cpu": 50.0},  # inside the pod's 120
            {"comm": "sleep", "cmd": "sleep 1", "where": "host", "cpu0": 0.0, "cpu": 1.0},
            {"comm": "true", "cmd": "true", "where": "host", "cpu0": 0.0, "cpu": 1.0},
        ],
        "cgroups": {k: [0.0, v] for k, v in read.items()},
        "cgroup_error": "",
    }
    text = cpu_sampler.report(data)
    rows = {line[11:]: float(line.split()[0]) for line in text.splitlines()[2:]}
    assert rows["podman's containers (their cgroups)"] == 1.5  # 60 + 30 s, not the parent's 100 nor conmon
    assert rows["pods (the kubelets' cgroups)"] == 2.0
    assert rows["other: yes"] == 1.0
    assert rows["2 smaller groups"] == round(2 / 60, 1)  # sleep's and true's 1 s each: one row, not dropped
    assert rows["short-lived processes (between samples: busy less all sampled)"] == round(
        10.0 - 1.5 - 2.0 - 1.0 - 2 / 60, 1
    )
    assert text.splitlines()[0] == "the machine: busy 10.0 of 12.0 CPU-min over 1.0 min (idle 2.0)"


def test_a_run_finds_the_cpu_its_command_burnt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.json"
    # 1.5 s of CPU, then 2 s asleep: a sample after the spin sees all of it, however slowly a busy machine runs us.
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass\ntime.sleep(2)\n"
    rc = cpu_sampler.main(["run", "--out", str(out), "--every", "0.2", "--", sys.executable, "-c", spin, MARK])
    assert rc == 0
    data = json.loads(out.read_text())
    [child] = [p for p in data["procs"] if MARK in p["cmd"]]
    assert child["where"] == "host" and child["cpu"] - child["cpu0"] >= 1.4, child
    assert data["machine"][0] is not None and data["machine"][1][0] - data["machine"][0][0] >= 1.0
    err = capsys.readouterr().err
    assert err.startswith("the machine: busy ") and "short-lived processes" in err, err
    assert cpu_sampler.main(["report", str(out)]) == 0


def test_bad_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cpu_sampler.main(["run", "--out", str(tmp_path / "x.json")])
    assert e.value.code == 2 and "no command" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cpu_sampler.main(["run", "--out", str(tmp_path / "x.json"), "--every", "0", "--", "true"])
    assert e.value.code == 2 and "--every" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text('{"procs": 3}')
    assert cpu_sampler.main(["report", str(junk)]) == 2
    assert "not a samples file" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_sampler_that_fails_says_its_counts_are_partial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: Path) -> dict[str, float]:
        raise ValueError("a cgroup file in a shape never seen")

    monkeypatch.setattr(cpu_sampler, "cgroup_usage", broken)
    data = cpu_sampler.Sampler(every=0.1).stop()
    assert data["error"] == "ValueError: a cgroup file in a shape never seen"
    assert "the counts are partial" in cpu_sampler.report(data)


def test_a_command_that_cannot_run_is_said_and_the_samples_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cpu.json"
    assert cpu_sampler.main(["run", "--out", str(out), "--every", "0.1", "--", str(tmp_path / "no-such")]) == 127
    assert "cannot run" in capsys.readouterr().err
    assert "machine" in json.loads(out.read_text())
