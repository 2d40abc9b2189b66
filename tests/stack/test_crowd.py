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


pytest_plugins = ["pytester"]

SUITE_CONFTEST = """
import pytest
from tests.support import crowd, tiers

pytest_runtest_setup = tiers.pytest_runtest_setup


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    tiers.pytest_collection_modifyitems(items)
    crowd.run_first(items)


@pytest.fixture(scope="session")
@tiers.needs("system", "starts a control plane")
def control_plane():
    return "plane"
"""


def test_a_crowd_module_without_a_cluster_runs_first(pytester: pytest.Pytester) -> None:
    """In file order but for the `crowd` modules that use no cluster: those go first, so that they are done before a
    cluster session's crowd module can start (tests/conftest.py wires the same hooks)."""
    markers = "".join(f"    {m}\n" for m in ("unit", "integration", "system", "cluster", "crowd"))
    pytester.makeini(f"[pytest]\naddopts = --strict-markers\nmarkers =\n{markers}")
    pytester.makeconftest(SUITE_CONFTEST)
    pytester.makepyfile(
        test_a="import pytest\npytestmark = pytest.mark.system\ndef test_plain(): pass\n",
        test_b="import pytest\npytestmark = [pytest.mark.system, pytest.mark.crowd]\n"
        "def test_node(control_plane): pass\n",
        test_c="import pytest\npytestmark = [pytest.mark.integration, pytest.mark.crowd]\n"
        "def test_live_one(): pass\ndef test_live_two(): pass\n",
        test_d="import pytest\npytestmark = pytest.mark.integration\ndef test_last(): pass\n",
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids == [
        "test_c.py::test_live_one",
        "test_c.py::test_live_two",
        "test_a.py::test_plain",
        "test_b.py::test_node",
        "test_d.py::test_last",
    ], result.stdout.str()


def test_every_module_that_holds_the_crowd_is_marked() -> None:
    """A module that takes the crowd lock without the marker would keep its place in the order: the first module of
    the other session to want the lock waits for it, as qualify's live runs waited for the node tests in run 33."""
    tests = Path(__file__).resolve().parents[1]
    holders = [p for p in tests.rglob("test_*.py") if "crowd(" in p.read_text() and p.name != Path(__file__).name]
    assert holders, "no module holds the crowd: this check checks nothing"
    unmarked = [str(p.relative_to(tests)) for p in holders if "pytest.mark.crowd" not in p.read_text()]
    assert not unmarked, f"these modules hold the crowd lock but are not marked `crowd`: {unmarked}"
