"""Follow the `vllm` container's log of this pod through the Kubernetes API, resuming after disconnects
without double counting, and noticing container restarts."""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from . import direct_http
from .logsource import LineSplitter

log = logging.getLogger(__name__)
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0


def _seconds_since(rfc3339: str) -> int:
    """Whole seconds since a Kubernetes log timestamp (`2026-12-02T11:00:00.123456789Z`); sub-second part dropped."""
    try:
        t = dt.datetime.fromisoformat(rfc3339[:19]).replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return 3600
    return max(0, math.ceil((dt.datetime.now(dt.timezone.utc) - t).total_seconds()))


def ts_key(rfc3339: str) -> str:
    """A sortable form of a kubelet timestamp. RFC3339Nano trims trailing zeros (`...00.12Z` vs `...00.123Z`),
    so plain string order is wrong; pad the fraction to nanoseconds."""
    base, dot, frac = rfc3339.rstrip("Z").partition(".")
    return f"{base}.{(frac if dot else '').ljust(9, '0')}"


class PodLogFollower:
    def __init__(
        self, api: Any, namespace: str, pod: str, container: str, on_restart: Callable[[], None] | None = None
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.on_restart = on_restart
        self.last_ts = ""  # RFC3339 timestamp of the last line handed on
        self.seen_at_last_ts = 0  # lines already handed on that carry exactly last_ts
        self.container_id = ""

    @classmethod
    def from_environment(cls, container: str, on_restart: Callable[[], None] | None = None) -> PodLogFollower:
        pod, ns = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        if not (pod and ns):
            raise RuntimeError("--log-source k8s needs POD_NAME and POD_NAMESPACE (downward API)")
        return cls(direct_http.kubernetes_core_api(), ns, pod, container, on_restart)

    def _check_container(self) -> None:
        pod = self.api.read_namespaced_pod(self.pod, self.namespace)
        for cs in pod.status.container_statuses or []:
            if cs.name == self.container:
                cid = cs.container_id or ""
                if self.container_id and cid and cid != self.container_id:
                    # A new container has a new log: start it from the beginning.
                    self.last_ts, self.seen_at_last_ts = "", 0
                    if self.on_restart:
                        self.on_restart()
                self.container_id = cid or self.container_id

    def stream(self, stop: threading.Event) -> Iterator[str]:
        """One connection; ends or raises on disconnect (the caller reconnects)."""
        self._check_container()
        kwargs: dict[str, Any] = {
            "container": self.container,
            "follow": True,
            "timestamps": True,
            "_preload_content": False,
        }
        if self.last_ts:
            # The client has no sinceTime: ask from a little before the last line, then drop what was handed on.
            kwargs["since_seconds"] = _seconds_since(self.last_ts) + 2  # last_ts is a ts_key(): same prefix
        # A read timeout: a half-open connection would otherwise block this stream forever without a word. A quiet
        # log then just reconnects every READ_TIMEOUT seconds (cheap; nothing is counted twice).
        kwargs["_request_timeout"] = (CONNECT_TIMEOUT, READ_TIMEOUT)
        resp = self.api.read_namespaced_pod_log(self.pod, self.namespace, **kwargs)
        skip_ts, skip_n = self.last_ts, self.seen_at_last_ts
        splitter = LineSplitter()
        for chunk in resp.stream() if hasattr(resp, "stream") else resp:
            if stop.is_set():
                return
            for line in splitter.feed(chunk):
                ts, _, text = line.partition(" ")
                ts = ts_key(ts)
                if skip_ts:
                    if ts < skip_ts:
                        continue
                    if ts == skip_ts and skip_n > 0:
                        skip_n -= 1
                        continue
                    skip_ts = ""
                if ts == self.last_ts:
                    self.seen_at_last_ts += 1
                else:
                    self.last_ts, self.seen_at_last_ts = ts, 1
                yield text
