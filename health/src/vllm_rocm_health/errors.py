"""One line, a person can act on, for an exception from the outside world. The Kubernetes client's ApiException
prints its status on the first line and the reason, every response header and the body on the next ones; what
says what to fix (`pods "x" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource "pods/log"`) is
the body's message."""

from __future__ import annotations

import json


def one_line(e: BaseException) -> str:
    status, body = getattr(e, "status", None), getattr(e, "body", None)
    if isinstance(status, int) and body is not None:
        reason = getattr(e, "reason", "") or ""
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError, TypeError):
            message = ""
        return f"HTTP {status} {reason}: {message}".rstrip(": ") if message or reason else f"HTTP {status}"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
