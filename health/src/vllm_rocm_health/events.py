"""Kubernetes Events on the sidecar's own pod, for state transitions an operator should see in `kubectl get events`."""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

from . import direct_http
from .errors import one_line

log = logging.getLogger(__name__)


class EventPoster:
    """Posts core/v1 Events about POD_NAME in POD_NAMESPACE. Without a cluster it only logs. A failure to post
    is logged and never stops the sidecar."""

    def __init__(self, api: Any | None, namespace: str = "", pod: str = "", pod_uid: str = "") -> None:
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.pod_uid = pod_uid
        self.posted: list[tuple[str, str]] = []

    @classmethod
    def from_environment(cls, enabled: bool = True) -> EventPoster:
        pod, ns = os.environ.get("POD_NAME", ""), os.environ.get("POD_NAMESPACE", "")
        if not (enabled and pod and ns and os.environ.get("KUBERNETES_SERVICE_HOST")):
            return cls(None)
        try:
            return cls(direct_http.kubernetes_core_api(), ns, pod, os.environ.get("POD_UID", ""))
        except Exception as e:  # no service account token, RBAC missing, ...
            log.warning("Kubernetes events disabled: %s", one_line(e))
            return cls(None)

    def post(self, reason: str, message: str, warning: bool) -> None:
        self.posted.append((reason, message))
        if self.api is None:
            return
        from kubernetes import client

        now = dt.datetime.now(dt.timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{self.pod}.", namespace=self.namespace),
            involved_object=client.V1ObjectReference(
                kind="Pod", name=self.pod, namespace=self.namespace, uid=self.pod_uid or None, api_version="v1"
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component="vllm-rocm-health"),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.api.create_namespaced_event(self.namespace, body)
        except Exception as e:
            log.warning("could not post event %s: %s", reason, one_line(e))
