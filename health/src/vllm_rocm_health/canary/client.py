"""The few OpenAI-compatible calls the canary makes, with load accounting."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx


class CanaryError(Exception):
    """The server could not be asked (down, timeout, non-200, malformed answer)."""


class CompletionClient:
    def __init__(self, base_url: str, timeout: float, on_request: Callable[[], None] | None = None,
                 on_usage: Callable[[int, int], None] | None = None) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self._on_request = on_request
        self._on_usage = on_usage

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._on_request is not None:
            self._on_request()  # counted before sending: a failed request is load too
        try:
            r = self._http.post(path, json=body)
        except httpx.HTTPError as e:
            raise CanaryError(f"{path}: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise CanaryError(f"{path}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            data = r.json()
            usage = data.get("usage") or {}
        except ValueError as e:
            raise CanaryError(f"{path}: not JSON: {r.text[:200]}") from e
        if self._on_usage is not None:
            self._on_usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        return data

    def model_id(self) -> str:
        try:
            r = self._http.get("/v1/models")
            r.raise_for_status()
            return r.json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as e:
            raise CanaryError(f"/v1/models: {e}") from e

    def server_version(self) -> str:
        """vLLM's /version, or "" where a server does not offer it."""
        try:
            return str(self._http.get("/version").json().get("version", ""))
        except (httpx.HTTPError, ValueError, AttributeError):
            return ""

    def complete(self, model: str, prompt: str, max_tokens: int) -> str:
        data = self._post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                              "temperature": 0, "stop": ["\n"]})
        try:
            return data["choices"][0]["text"]
        except (KeyError, IndexError, TypeError) as e:
            raise CanaryError(f"malformed completion: {str(data)[:200]}") from e

    def prompt_logprobs(self, model: str, text: str) -> list[float | None]:
        data = self._post("/v1/completions", {"model": model, "prompt": text, "max_tokens": 0, "echo": True,
                                              "logprobs": 1, "temperature": 0})
        try:
            return list(data["choices"][0]["logprobs"]["token_logprobs"])
        except (KeyError, IndexError, TypeError) as e:
            raise CanaryError(f"no prompt logprobs in answer: {str(data)[:200]}") from e
