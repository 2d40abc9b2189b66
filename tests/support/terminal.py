"""Lines in a test session's own output from inside a fixture, where pytest captures prints: what a long setup
spent its time on belongs in every run's log, not only in a failure's captured output."""

from __future__ import annotations

import pytest


def say(config: pytest.Config | None, message: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter") if config else None
    capture = config.pluginmanager.get_plugin("capturemanager") if config else None
    if reporter is None or capture is None:
        print(message)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(message)
