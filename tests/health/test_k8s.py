"""The Kubernetes log source and events, against an in-process test double of CoreV1Api (no cluster here)."""

from __future__ import annotations

import datetime as dt
import threading
from types import SimpleNamespace

from vllm_rocm_health import logsource
from vllm_rocm_health.events import EventPoster
from vllm_rocm_health.k8s_logs import PodLogFollower


def ts(sec: int) -> str:
    t = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(seconds=100 - sec)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{sec:09d}Z"


class FakeCoreV1Api:
    """Test double: serves a growing container log, drops the connection after `cut` lines, can restart."""

    def __init__(self, lines: list[str], cut: int) -> None:
        self.lines = [f"{ts(i)} {text}" for i, text in enumerate(lines)]
        self.cut = cut
        self.container_id = "containerd://aaa"
        self.calls: list[dict] = []

    def read_namespaced_pod(self, name: str, namespace: str):
        cs = SimpleNamespace(name="vllm", container_id=self.container_id, restart_count=0)
        return SimpleNamespace(status=SimpleNamespace(container_statuses=[cs]))

    def read_namespaced_pod_log(self, name: str, namespace: str, **kw):
        self.calls.append(kw)
        assert kw["timestamps"] and kw["follow"] and kw["container"] == "vllm"
        first = len(self.calls) == 1
        # A resumed stream repeats some lines from before the cut (since_seconds overlaps).
        start = 0 if first else max(0, self.cut - 2)
        end = self.cut if first else len(self.lines)

        def gen():
            for line in self.lines[start:end]:
                yield (line + "\n").encode()
            if first:
                raise ConnectionResetError("API server went away")

        return SimpleNamespace(stream=gen)


def test_resume_after_disconnect_without_double_counting() -> None:
    texts = [f"line {i}" for i in range(10)]
    api = FakeCoreV1Api(texts, cut=5)
    follower = PodLogFollower(api, "ns", "pod-0", "vllm")
    stop = threading.Event()
    got: list[str] = []
    ups: list[bool] = []
    for line in logsource.retrying(lambda: follower.stream(stop), stop, lambda up, _why: ups.append(up), backoff=0.01):
        got.append(line)
        if len(got) == 10:
            stop.set()
    assert got == texts
    assert "since_seconds" in api.calls[1] and api.calls[1]["since_seconds"] >= 2
    assert False in ups  # the disconnect was reported


def test_container_restart_is_detected() -> None:
    api = FakeCoreV1Api(["a"], cut=1)
    restarts: list[int] = []
    follower = PodLogFollower(api, "ns", "pod-0", "vllm", on_restart=lambda: restarts.append(1))
    follower._check_container()
    api.container_id = "containerd://bbb"
    follower.last_ts = "x"
    follower._check_container()
    assert restarts == [1] and follower.last_ts == ""


class FakeEventsApi:
    """Test double of CoreV1Api.create_namespaced_event."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.bodies: list = []

    def create_namespaced_event(self, namespace: str, body) -> None:
        if self.fail:
            raise RuntimeError("403 forbidden")
        self.bodies.append((namespace, body))


def test_events_are_posted_on_own_pod() -> None:
    api = FakeEventsApi()
    poster = EventPoster(api, "ns", "pod-0", "uid-1")
    poster.post("CanaryFailed", "score 0.1 < 0.6", warning=True)
    ((ns, body),) = api.bodies
    assert ns == "ns" and body.reason == "CanaryFailed" and body.type == "Warning"
    assert body.involved_object.name == "pod-0" and body.involved_object.kind == "Pod"


def test_event_failure_is_not_fatal() -> None:
    EventPoster(FakeEventsApi(fail=True), "ns", "pod-0").post("X", "y", warning=False)


def test_no_cluster_no_events(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert EventPoster.from_environment().api is None


def test_sidecar_posts_transition_events(tmp_path) -> None:
    from pathlib import Path

    from vllm_rocm_health.app import Sidecar
    from vllm_rocm_health.canary import CanaryConfig
    from vllm_rocm_health.config import SidecarConfig

    api = FakeEventsApi()
    sidecar = Sidecar(
        SidecarConfig(listen="127.0.0.1:0", canary=CanaryConfig(enabled=False)),
        event_poster=EventPoster(api, "ns", "pod-0"),
    )
    fixtures = Path(__file__).resolve().parents[2] / "health" / "fixtures"
    for name in ("v0.11.0-downgrade-full.log", "v0.11.0-oom-during-capture.log"):
        for line in (fixtures / name).read_text().splitlines():
            sidecar.on_line(line)
    reasons = [b.reason for _, b in api.bodies]
    assert reasons == ["CudaGraphModeDowngraded", "CudaGraphCaptureFailed"]  # once each, not per line


def test_trimmed_nanosecond_timestamps_sort_correctly() -> None:
    from vllm_rocm_health.k8s_logs import ts_key

    # kubelet's RFC3339Nano drops trailing zeros: as strings "00.12Z" > "00.123Z", as times it is earlier.
    assert ts_key("2026-12-02T11:00:00.12Z") < ts_key("2026-12-02T11:00:00.123Z") < ts_key("2026-12-02T11:00:01Z")
