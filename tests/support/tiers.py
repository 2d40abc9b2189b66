"""The test tiers, pytest markers registered in pyproject.toml, and their enforcement (README, "Tests").

- `unit`: no vLLM server, no vLLM venv, no image, container or cluster. An unmarked test is `unit`.
- `integration`: the one shared vLLM CPU server (tests/conftest.py) or the vLLM CPU venv (`make setup-vllm`).
- `system`: images (buildah), containers (podman, compose), the Kubernetes control plane or node, the `make run`
  stack. A system test may also use what integration tests use.

A fixture that starts one of these says so under its `@pytest.fixture`:

    @pytest.fixture(scope="session")
    @tiers.needs("integration", "starts the vLLM CPU server")
    def vllm_server(...): ...

and a test that uses it, directly or through other fixtures, without the marker of that tier (or a higher one) fails
at setup, before any fixture starts anything, with the tier to mark it with. A test that starts such a thing in its
own body (no fixture) carries the marker by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest

TIERS = ("unit", "integration", "system")  # in order: each may use what the ones before it use
# The fixtures that start a Kubernetes control plane or the node: a test that uses one, directly or through others,
# gets the `cluster` marker, so that `make test` runs it in the session that waits for the Kubernetes build.
CLUSTER_FIXTURES = frozenset({"control_plane", "node_cluster"})
_NEED = "_vllm_rocm_tier"
F = TypeVar("F", bound=Callable[..., Any])


def needs(tier: str, what: str) -> Callable[[F], F]:
    """Declare that a fixture needs `tier`: `what` it starts, said in the refusal."""
    if tier not in TIERS[1:]:
        raise ValueError(f"a fixture needs one of {TIERS[1:]}, not {tier!r}")

    def declare(fixture: F) -> F:
        # Under @pytest.fixture this sees the plain function (pytest's fixture object copies its attributes too).
        target = getattr(fixture, "_get_wrapped_function", lambda: fixture)()
        setattr(target, _NEED, (tier, what))
        return fixture

    return declare


def tier_of(item: pytest.Item) -> str:
    """The test's tier: its tier marker (from the test, its class or module), `unit` when it has none."""
    marked = {m.name for m in item.iter_markers() if m.name in TIERS}
    if len(marked) > 1:
        raise pytest.UsageError(f"{item.nodeid} is marked with more than one tier: {sorted(marked)}")
    return marked.pop() if marked else "unit"


def mark_unmarked(items: Iterable[pytest.Item]) -> None:
    """Give every test without a tier marker the `unit` marker, so `-m unit` selects it."""
    for item in items:
        if tier_of(item) == "unit":
            item.add_marker(pytest.mark.unit)


def mark_cluster(items: Iterable[pytest.Item]) -> None:
    """Give every test that uses a cluster fixture (CLUSTER_FIXTURES) the `cluster` marker: by the fixtures it uses,
    not by its file, so that no test starts a cluster outside the session meant for it."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.cluster)


def refusal(item: pytest.Item) -> str:
    """Why `item` may not run in its tier ("" when it may): the fixtures it uses that need a higher one."""
    own = TIERS.index(tier_of(item))
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # not a function test (a doctest, a plugin's item): it uses no fixture of ours
        return ""
    lacking = []
    for name in item.fixturenames:  # the closure: fixtures used through other fixtures too
        for definition in info.name2fixturedefs.get(name, ()):
            tier, what = getattr(definition.func, _NEED, ("unit", ""))
            if TIERS.index(tier) > own:
                lacking.append((TIERS.index(tier), f"`{name}` {what} ({tier})"))
    if not lacking:
        return ""
    need = TIERS[max(rank for rank, _ in lacking)]
    return (
        f"{item.nodeid} is a {TIERS[own]} test, but its fixtures need the {need} tier: "
        + "; ".join(sorted(text for _, text in lacking))
        + f". Mark it `@pytest.mark.{need}` (or its module: `pytestmark = pytest.mark.{need}`); "
        f"tiers: tests/support/tiers.py"
    )


# The hooks (tests/conftest.py takes them): every collected test gets its tier, and is checked before its setup.


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_unmarked(items)
    mark_cluster(items)


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test starts
def pytest_runtest_setup(item: pytest.Item) -> None:
    why = refusal(item)
    if why:
        pytest.fail(why, pytrace=False)
