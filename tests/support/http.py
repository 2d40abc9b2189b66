"""GET for tests that poll a server which may not be listening yet: a refused or timed-out connection is status 0."""

from __future__ import annotations

import urllib.error
import urllib.request


def get(url: str, timeout: float = 10) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""
