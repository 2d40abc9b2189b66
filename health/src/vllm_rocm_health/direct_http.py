"""The sidecar's HTTP clients talk to the URL they are given and to nothing else.

httpx (and the Kubernetes client) read the process environment by default: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and
NO_PROXY in any case (urllib's getproxies, which takes every `*_proxy` variable), SSL_CERT_FILE / SSL_CERT_DIR and
~/.netrc (NETRC). A proxy variable in the sidecar's environment (an image's ENV, a cluster-wide proxy injector)
would send the canary's questions to whatever answers there, and the real vLLM would never be asked: the canary
would vouch for another server. So every client of the sidecar is made here, with the environment ignored and
redirects not followed (a 30x from "vLLM" is an answer to judge, not a new target: the canary and the /health poller
both take anything but 200 as a failure).

Name resolution reads the environment too: glibc's resolver takes HOSTALIASES (an alias file for names without a
dot, such as compose's `http://vllm:8000`) and LOCALDOMAIN (the search list) from it. The sidecar drops both from its
own environment at start, before its first lookup. The chart's `--vllm-url` is an address (127.0.0.1), which no
resolver touches."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

import httpx

log = logging.getLogger(__name__)

# What httpx or the Kubernetes client would take from the environment, besides the proxy variables.
_OTHER_ENV = ("NETRC", "SSL_CERT_FILE", "SSL_CERT_DIR")
# What glibc's resolver takes from the environment that can turn one host name into another.
RESOLVER_ENV = ("HOSTALIASES", "LOCALDOMAIN")


def client(**kwargs: Any) -> httpx.Client:
    """An httpx client that ignores the environment and never follows a redirect."""
    return httpx.Client(trust_env=False, follow_redirects=False, **kwargs)


def ignored_environment(environ: Mapping[str, str]) -> list[str]:
    """The names (never the values: a proxy URL may carry a password) of the variables set in `environ` that an HTTP
    client would otherwise read, and that the sidecar's clients ignore."""
    proxies = [k for k, v in environ.items() if k.lower().endswith("_proxy") and v]
    return sorted(proxies) + [k for k in _OTHER_ENV if environ.get(k)]


def isolate(environ: MutableMapping[str, str]) -> list[str]:
    """Once at start: drop the resolver's redirecting variables from the process environment (os.environ writes
    through to the C library's), and say once which variables were present and are ignored. Returns their names."""
    names = ignored_environment(environ) + [k for k in RESOLVER_ENV if k in environ]
    for k in RESOLVER_ENV:
        environ.pop(k, None)
    if names:
        log.warning(
            "ignoring %s in the environment: the canary and the /health poller talk only to --vllm-url, and the "
            "Kubernetes client only to the API server, never through a proxy or a resolver alias",
            ", ".join(names),
        )
    return names


def in_cluster(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a pod: the kubelet sets KUBERNETES_SERVICE_HOST in every container."""
    return bool((os.environ if environ is None else environ).get("KUBERNETES_SERVICE_HOST"))


def kubernetes_core_api(kubeconfig_outside_cluster: bool = False) -> Any:
    """The in-cluster Kubernetes API (CoreV1Api) without the environment's proxy: the client reads
    HTTPS_PROXY / NO_PROXY into its Configuration (`getproxies()` in `Configuration.__init__`, kubernetes 37.0.2).
    The API server is reached over TLS checked against the service account's CA either way; a proxy could only
    withhold the log or the Events, and the sidecar's inputs should not depend on one.

    `kubeconfig_outside_cluster`: for the operator commands (`vllm-rocm qualification publish|current`), which also
    run from a workstation: outside a pod (no KUBERNETES_SERVICE_HOST) the kubeconfig is read instead, as kubectl
    reads it (KUBECONFIG, else ~/.kube/config; its current context). The environment's proxy is ignored there too;
    a `proxy-url` the kubeconfig's cluster names is that file's explicit setting and is used. In a pod the service
    account is always used (a kubeconfig is never a fallback for broken in-cluster credentials). The serving
    sidecar never passes it: its clients are in-cluster only.
    Raises RuntimeError saying what is missing when no configuration can be loaded."""
    from kubernetes import client as k8s
    from kubernetes import config

    configuration = k8s.Configuration()
    # Before loading: the proxy setter also stops the host setter from re-reading the environment.
    configuration.proxy = None
    configuration.no_proxy = None
    try:
        if kubeconfig_outside_cluster and not in_cluster():
            config.load_kube_config(client_configuration=configuration, persist_config=False)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        where = (
            f"the kubeconfig ({os.environ.get('KUBECONFIG') or '~/.kube/config'})"
            if kubeconfig_outside_cluster and not in_cluster()
            else "the pod's service account (in-cluster configuration)"
        )
        raise RuntimeError(f"no Kubernetes API configuration from {where}: {e}") from e
    return k8s.CoreV1Api(k8s.ApiClient(configuration))
