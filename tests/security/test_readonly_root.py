"""vLLM runs the way the chart runs it: read-only root filesystem, a high UID the image does not know, no capabilities,
no new privileges, and writable only where the chart mounts volumes (the vLLM container's mounts and environment are
read from the rendered chart). The real vLLM CPU build serves a completion in that sandbox (tests/security/
pod_sandbox.sh), with the compiler on, as the chart's default is: torch.compile, the compile cache, /tmp and HOME
are all exercised.

What it cannot show: the ROCm-only writers (AITER's JIT directory, MIOpen, hipBLASLt, Triton on a GPU). Their paths
come from their sources and sit below HOME or /tmp (chart README, "Security").
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from vllm_rocm_qualify.processes import ManagedProcess, wait_until
from vllm_rocm_stack.config import WORK
from vllm_rocm_stack.vllm_server import CPU_ARGS

from tests.support.helm_chart import ROOT, container, pod_spec, render
from tests.support.vllm_server import VLLM_PYTHON, free_port

HERE = Path(__file__).resolve().parent

SANDBOX = HERE / "pod_sandbox.sh"
MODEL = WORK / "models" / "smollm2-135m-instruct"
HIDDEN = ("/home/", "/root/", "/tmp/")  # host directories the sandbox does not show (pod_sandbox.sh)
# The test's own settings on top of the chart's: nothing from a model hub, a KV cache a small machine can hold
# (CPU_ARGS, with the server's other arguments).
TEST_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
}


def need_sandbox() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a mount namespace with bind mounts, then setpriv to the chart's UID); CI runs as root")
    for tool in ("unshare", "chroot", "setpriv"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} (util-linux) is missing")


def chart_vllm() -> dict[str, Any]:
    """The vLLM container's identity, environment and writable volumes, as the default render has them."""
    spec = pod_spec(render())
    vllm = container(spec, "vllm")
    sc = vllm["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    writable = [
        m["mountPath"]
        for m in vllm["volumeMounts"]
        if not m.get("readOnly")
        and ("emptyDir" in volumes[m["name"]] or "persistentVolumeClaim" in volumes[m["name"]])
        and m["mountPath"] != "/dev/shm"
    ]  # the sandbox keeps the host's /dev/shm
    env = {e["name"]: e["value"] for e in vllm["env"] if "value" in e}
    return {"uid": sc["runAsUser"], "gid": sc["runAsGroup"], "writable": writable, "env": env}


def image_paths() -> list[Path]:
    """What the "image" needs that lives below a host directory the sandbox hides (a checkout in /tmp or /home, an
    interpreter in /root/.pyenv): the repository, the venvs and their interpreters."""
    paths = {ROOT}
    for python in (p for p in (VLLM_PYTHON, Path(sys.executable)) if p.exists()):  # no vLLM venv: a unit run
        paths |= {python.parent.parent.resolve(), Path(os.path.realpath(python)).parent.parent}
    return sorted(p for p in paths if str(p).startswith(HIDDEN))


def sandbox(tmp: Path, pod: dict[str, Any], argv: list[str]) -> tuple[list[str], dict[str, Path]]:
    """argv wrapped in the sandbox, and the host directory behind each volume."""
    (tmp / "root").mkdir()
    vols: dict[str, Path] = {}
    lines = []
    for i, target in enumerate(pod["writable"]):
        src = tmp / f"vol{i}"
        src.mkdir()
        # emptyDir: world-writable; a PVC: group-owned by fsGroup (= the GID here). Both: writable by the UID.
        os.chown(src, pod["uid"], pod["gid"])
        src.chmod(0o770 | stat.S_ISGID)
        vols[target] = src
        lines.append(f"rw {src} {target}")
    # After the volumes: a checkout below /tmp must show through the /tmp volume.
    lines += [f"ro {p} {p}" for p in image_paths()]
    (tmp / "mounts").write_text("\n".join(lines) + "\n")
    return (
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            str(SANDBOX),
            str(tmp / "root"),
            str(tmp / "mounts"),
            f"{pod['uid']}:{pod['gid']}",
            *argv,
        ],
        vols,
    )


def test_the_sandbox_is_read_only_but_for_the_chart_volumes(tmp_path: Path) -> None:
    """The sandbox can fail: a write anywhere but a volume is refused, a write to each volume works, and the process
    has the chart's UID, no capabilities and no_new_privs."""
    need_sandbox()
    pod = chart_vllm()
    probe = (
        "import os, sys\n"
        f"for p in {pod['writable']!r}:\n"
        "    open(os.path.join(p, 'probe'), 'w').write('x')\n"
        "bad = []\n"
        f"for p in ['/', '/etc', '/usr', '/var', {str(Path(sys.executable).parent)!r}, {str(HERE)!r}]:\n"
        "    try:\n"
        "        open(os.path.join(p, 'probe'), 'w')\n"
        "        bad.append(p)\n"
        "    except OSError as e:\n"
        "        assert e.errno == 30, (p, e)  # EROFS, not a permission that root would have had\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "print(os.getuid(), os.getgid(), status['CapEff'].strip(), status['NoNewPrivs'].strip(), bad)\n"
    )
    argv, vols = sandbox(tmp_path, pod, [sys.executable, "-c", probe])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(pod["uid"]), str(pod["gid"]), "0000000000000000", "1", "[]"], proc.stdout
    assert all((v / "probe").read_text() == "x" for v in vols.values())


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_vllm_serves_on_a_read_only_root(tmp_path: Path) -> None:
    need_sandbox()
    if not (VLLM_PYTHON.exists() and (MODEL / "config.json").exists()):
        pytest.skip("the vLLM CPU setup is missing: run `make setup-vllm` (make test does it)")
    pod = chart_vllm()
    env = pod["env"]
    model_cache = env["HF_HOME"]
    assert model_cache in pod["writable"], pod
    port = free_port()
    served = str(PurePosixPath(model_cache) / "model")
    argv, vols = sandbox(
        tmp_path,
        pod,
        [
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in {**env, **TEST_ENV}.items()),
            str(VLLM_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            served,
            "--served-model-name",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "2048",
            "--dtype",
            "bfloat16",
            "--seed",
            "0",
            *CPU_ARGS,
        ],
    )
    # The model sits on the model-cache volume, owned by the pod's user, as a download into HF_HOME would.
    shutil.copytree(MODEL, vols[model_cache] / "model")
    for p in [vols[model_cache] / "model", *(vols[model_cache] / "model").iterdir()]:
        os.chown(p, pod["uid"], pod["gid"])
    server = ManagedProcess("vLLM (read-only root)", argv, tmp_path / "vllm.log")

    def healthy() -> bool:
        if not server.alive():
            raise AssertionError(f"vLLM exited with {server.returncode()}; log tail:\n{server.log_tail(40)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    server.start()
    try:
        # Start-up with torch.compile takes minutes on a busy 2-core machine; the wait ends early if vLLM exits.
        assert wait_until(healthy, 600, interval=1.0), f"not healthy in 600 s:\n{server.log_tail(40)}"
        body = json.dumps({"model": "m", "prompt": "2+2=", "max_tokens": 4, "temperature": 0}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            out = json.load(r)
        assert out["choices"][0]["text"], out
    finally:
        server.stop(timeout=30)
    log = (tmp_path / "vllm.log").read_text(errors="replace")
    refused = [line for line in log.splitlines() if "Read-only file system" in line or "Permission denied" in line]
    assert not refused, "vLLM hit a write it could not make (a fallback may hide it):\n" + "\n".join(refused[:20])
    # The volumes were where vLLM wrote: its compile cache and /tmp (torch.compile's scratch).
    assert any(on_host(vols, env["VLLM_CACHE_ROOT"]).rglob("*")), "nothing in the compile cache"
    assert any(vols["/tmp"].iterdir()), "nothing in /tmp"


def on_host(vols: dict[str, Path], path: str) -> Path:
    """The host directory behind a path inside the sandbox (below one of its volumes)."""
    mount = max((m for m in vols if PurePosixPath(path).is_relative_to(m)), key=len)
    return vols[mount] / PurePosixPath(path).relative_to(mount)


def test_sandbox_script_is_shellcheck_clean() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    proc = subprocess.run([str(shellcheck), str(SANDBOX)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
