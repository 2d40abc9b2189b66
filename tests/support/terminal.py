"""Lines in a test session's own output from inside a fixture, where pytest captures prints: what a long setup
spent its time on belongs in every run's log, not only in a failure's captured output. Each line starts with the
time of day, as the image tool's lines do: `make test` runs several sessions side by side, and which one a setup
waited for is read by lining their lines up."""

from __future__ import annotations

import time

import pytest


def say(config: pytest.Config | None, message: str) -> None:
    message = f"{time.strftime('%H:%M:%S')} {message}"
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config else None
    capture = config.pluginmanager.get_plugin("capturemanager") if config else None
    if reporter is None or capture is None:
        print(message)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(message)
