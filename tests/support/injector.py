"""FAILURE INJECTOR, not a vLLM: an OpenAI-compatible answerer for the canary's own requests, for the faults a real
server cannot be told to produce on cue (bodies of the wrong shape, NaN logprobs, a 200 with a list in it).

By default it answers what a right server would: the sums the canary asks, the fresh problems (a count continued, a
number copied), and the baseline's logprobs for the fingerprint texts. `override(kind, status, body)` replaces the
answers of one kind of request ("problem", "fresh", "long", "fingerprint", "models") with an arbitrary status and JSON
body; `wrong` answers chosen prompts wrong (a steady wrong answer to one problem, or a one-off flip). `salts` keeps the
`cache_salt` of every completion request, in order. It serves the same answers through an
httpx.MockTransport (in-process tests) and over real HTTP (tests of the sidecar process)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from typing import Any

import httpx
from vllm_rocm_health.canary import fingerprint, problems
from vllm_rocm_health.canary.baseline import Baseline

from tests.support.http import LocalServer, QuietHandler

_SUM = re.compile(r"(\d+) \+ (\d+) =$")
_COUNT = re.compile(r"(\d+), (\d+), (\d+), (\d+),$")
_COPY = re.compile(r"Copy: (\d+) ->$")
KINDS = ("models", "problem", "fresh", "long", "fingerprint")


class CanaryAnswerer:
    def __init__(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self.overrides: dict[str, tuple[int, Any]] = {}
        self.seen: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.drip: set[str] = set()  # kinds answered one byte per second (HTTP server only): a stalled answer
        self.health_status = 200  # what /health answers (HTTP server only): a /health outage on cue
        self.wrong: dict[str, int] = {}  # prompt ending (e.g. "7 + 8 =") -> the wrong number answered to it
        self.salts: list[str | None] = []
        self._lock = threading.Lock()

    def override(self, kind: str, status: int, body: Any) -> None:
        assert kind in KINDS, kind
        self.overrides[kind] = (status, body)

    def clear(self) -> None:
        self.overrides.clear()
        self.drip.clear()
        self.wrong.clear()

    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[str, int, Any]:
        kind, right = self._right(method, path, body or {})
        with self._lock:
            self.seen[kind] = self.seen.get(kind, 0) + 1
        return (kind, *self.overrides.get(kind, right))

    def _right(self, method: str, path: str, body: dict[str, Any]) -> tuple[str, tuple[int, Any]]:
        if path == "/v1/models":
            return "models", (200, {"object": "list", "data": [{"id": self.baseline.model, "object": "model"}]})
        if path != "/v1/completions" or method != "POST":
            return "other", (404, {"error": "not found"})
        prompt = str(body.get("prompt", ""))
        with self._lock:
            self.salts.append(body.get("cache_salt"))
        usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        if body.get("echo"):
            i = fingerprint.REFERENCE_TEXTS.index(prompt)
            choice = {"index": 0, "text": prompt, "logprobs": {"token_logprobs": list(self.baseline.fingerprints[i])}}
            return "fingerprint", (200, {"choices": [choice], "usage": usage})
        kind = "long" if prompt.startswith(problems.LONG_TEXT) else "problem"
        answer: int | None = None
        if m := _SUM.search(prompt):
            answer = int(m[1]) + int(m[2])
        elif m := _COUNT.search(prompt):
            kind, answer = "fresh", int(m[4]) + 1
        elif m := _COPY.search(prompt):
            kind, answer = "fresh", int(m[1])
        for ending, wrong in self.wrong.items():
            if prompt.endswith(ending):
                answer = wrong
        text = " and so on" if answer is None else f" {answer}"
        return kind, (200, {"choices": [{"index": 0, "text": text}], "usage": usage})

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content) if request.content else None
            _, status, data = self.answer(request.method, request.url.path, body)
            return httpx.Response(
                status, content=json.dumps(data).encode(), headers={"Content-Type": "application/json"}
            )

        return httpx.MockTransport(handle)


class AnswererServer(LocalServer):
    """The answerer over real HTTP on 127.0.0.1, with vLLM's /health (`health_status`) for the sidecar's poller.
    It also answers requests sent to it as an HTTP proxy (absolute-form targets, `GET http://host/path`), as a
    decoy a proxy variable could send a client to. `requests` counts every request it got, /health included."""

    def __init__(self, answerer: CanaryAnswerer) -> None:
        outer = answerer
        self.requests = 0
        server = self

        class Handler(QuietHandler):
            def _reply(self) -> None:
                server.requests += 1
                path = urllib.parse.urlsplit(self.path).path
                if path == "/health":
                    kind, status, data = "health", outer.health_status, None
                else:
                    raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    kind, status, data = outer.answer(self.command, path, json.loads(raw) if raw else None)
                payload = b"" if data is None else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if kind not in outer.drip:
                    self.wfile.write(payload)
                    return
                try:  # a byte a second: every read is quick, the answer never completes
                    for i in range(len(payload)):
                        self.wfile.write(payload[i : i + 1])
                        self.wfile.flush()
                        time.sleep(1.0)
                except OSError:
                    pass

            do_GET = do_POST = _reply  # noqa: N815 - http.server's naming

        super().__init__(Handler, name="answerer")


class FailureInjectingVllmHealth(LocalServer):
    """Failure-injection double for vLLM's /health only (a real server cannot be told to return 500 or hang): every
    GET is answered `status` after `delay` seconds. `requests` counts the GETs begun, so that a test can wait for the
    client to have asked again rather than for a time."""

    def __init__(self) -> None:
        self.status = 200
        self.delay = 0.0
        self.requests = 0
        self._asked = threading.Condition()
        outer = self

        class H(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                with outer._asked:  # counted before `delay` is read: a GET counted after a change sees it
                    outer.requests += 1
                    outer._asked.notify_all()
                time.sleep(outer.delay)
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        super().__init__(H, name="health")

    def wait_requests(self, n: int, timeout: float = 60) -> None:
        """Until `n` more GETs than now have begun."""
        with self._asked:
            want = self.requests + n
            assert self._asked.wait_for(lambda: self.requests >= want, timeout), f"{self.requests} of {want} GETs"


def right_answers(seed: int, n: int) -> list[int]:
    return [p.answer for p in problems.generate(seed, n)]
