"""The one-line error text the sidecar logs and puts in /readyz for failures outside it (vllm_rocm_health.errors)."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException
from vllm_rocm_health.errors import one_line


def api_error(status: int, reason: str, body: str | None) -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = body
    return e


def test_api_error_says_what_is_forbidden_on_one_line() -> None:
    message = 'pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource "pods/log" in API group ""'
    text = one_line(api_error(403, "Forbidden", json.dumps({"kind": "Status", "message": message})))
    assert text == f"HTTP 403 Forbidden: {message}"
    assert "\n" not in text
    # What str() gives instead: the status alone on the first line, headers and the body after it.
    assert str(api_error(403, "Forbidden", "{}")).splitlines()[0] == "(403)"


def test_api_error_without_a_readable_body_keeps_status_and_reason() -> None:
    assert one_line(api_error(500, "Internal Server Error", "<html>")) == "HTTP 500 Internal Server Error"
    assert one_line(api_error(503, "", "")) == "HTTP 503"


def test_other_exceptions_name_their_type_and_first_line() -> None:
    assert one_line(ValueError("bad value\ntraceback noise")) == "ValueError: bad value"
    assert one_line(TimeoutError()) == "TimeoutError"
