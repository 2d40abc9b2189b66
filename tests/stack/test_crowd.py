"""tests/support/crowd.py: the machine's one crowd of vLLM engines is held by one module at a time; the other waits,
says whom it waits for, and gets it when the holder is done (also when the holder failed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support import crowd


def test_the_second_waits_for_the_first_and_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crowd, "LOCK", tmp_path / "crowd.lock")
    said: list[str] = []
    monkeypatch.setattr(crowd, "say", lambda config, text: said.append(text))
    order: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with crowd.crowd("module A"):
            order.append("A in")
            first_in.set()
            release.wait(30)
            order.append("A out")

    a = threading.Thread(target=first)
    a.start()
    assert first_in.wait(30)

    def second() -> None:
        with crowd.crowd("module B"):
            order.append("B in")

    b = threading.Thread(target=second)
    b.start()
    # B is waiting, and has said for whom.
    for _ in range(300):
        if said:
            break
        threading.Event().wait(0.1)
    assert said and "module A" in said[0] and "module B" in said[0], said
    assert order == ["A in"]
    release.set()
    a.join(30)
    b.join(30)
    assert order == ["A in", "A out", "B in"]


def test_a_failed_holder_releases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crowd, "LOCK", tmp_path / "crowd.lock")
    with pytest.raises(RuntimeError), crowd.crowd("module A"):
        raise RuntimeError("a fixture failed")
    with crowd.crowd("module B", timeout=1):
        pass


def test_a_wait_that_never_ends_times_out_with_the_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crowd, "LOCK", tmp_path / "crowd.lock")
    monkeypatch.setattr(crowd, "say", lambda config, text: None)
    with crowd.crowd("module A"), pytest.raises(TimeoutError, match="still held"), crowd.crowd("module B", timeout=1):
        pass
