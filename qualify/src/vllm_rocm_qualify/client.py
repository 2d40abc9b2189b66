"""The OpenAI-compatible calls qualify makes: exact token-id prompts, greedy outputs with top logprobs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import httpx


class RequestFailed(Exception):
    pass


@dataclass
class Output:
    """One greedy completion: token ids, their logprobs, and the top alternatives at each position."""

    tokens: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    top: list[dict[int, float]] = field(default_factory=list)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["top"] = [{str(k): v for k, v in t.items()} for t in self.top]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Output:
        return cls(
            list(d["tokens"]), list(d["lps"]), [{int(k): v for k, v in t.items()} for t in d["top"]], d.get("error", "")
        )


def _token_id(text: str) -> int:
    # return_tokens_as_token_ids: "token_id:123"
    return int(text.rsplit(":", 1)[1])


class Client:
    def __init__(self, base_url: str, model: str, timeout: float) -> None:
        self.model = model
        # Enough connections for the largest burst or client count: httpx's default pool (100) would queue.
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256)
        )

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self._http.post(path, json=body)
        except httpx.HTTPError as e:
            raise RequestFailed(f"{path}: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            raise RequestFailed(f"{path}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()
        except ValueError as e:
            raise RequestFailed(f"{path}: not JSON: {r.text[:200]}") from e

    def max_model_len(self) -> int:
        try:
            r = self._http.get("/v1/models")
            r.raise_for_status()
            return int(r.json()["data"][0]["max_model_len"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
            raise RequestFailed(f"/v1/models: no max_model_len: {e}") from e

    def tokenize(self, text: str) -> list[int]:
        data = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        try:
            return [int(t) for t in data["tokens"]]
        except (KeyError, TypeError, ValueError) as e:
            raise RequestFailed(f"/tokenize: {str(data)[:200]}") from e

    def greedy(self, prompt: list[int], max_tokens: int, top: int) -> Output:
        data = self._post(
            "/v1/completions",
            {
                "model": self.model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "logprobs": top,
                "return_tokens_as_token_ids": True,
            },
        )
        try:
            lp = data["choices"][0]["logprobs"]
            return Output(
                [_token_id(t) for t in lp["tokens"]],
                [float(x) for x in lp["token_logprobs"]],
                [{_token_id(k): float(v) for k, v in (t or {}).items()} for t in lp["top_logprobs"]],
            )
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise RequestFailed(f"no token logprobs in the answer: {str(data)[:200]}") from e

    def fixed_length(self, prompt: list[int], max_tokens: int) -> int:
        """A throughput request: exactly max_tokens out (ignore_eos); returns the completion tokens served."""
        data = self._post(
            "/v1/completions",
            {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True},
        )
        try:
            return int(data["usage"]["completion_tokens"])
        except (KeyError, TypeError, ValueError) as e:
            raise RequestFailed(f"no usage in the answer: {str(data)[:200]}") from e
