"""The tiers hold (tests/support/tiers.py): a small test suite run by pytest itself (pytester), with the tiers' hooks
and two fixtures that declare what they start, shows that a test not marked for a fixture's tier is refused at setup,
naming the tier, before the fixture starts anything; that an unmarked test is `unit`; and that a test using a cluster
fixture, directly or through another, is `cluster` (the session `make test` runs those in)."""

from __future__ import annotations

import pytest

from tests.support import tiers

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from tests.support import tiers

pytest_collection_modifyitems = tiers.pytest_collection_modifyitems
pytest_runtest_setup = tiers.pytest_runtest_setup


@pytest.fixture(scope="session")
@tiers.needs("integration", "starts a server")
def server(request):
    (request.config.rootpath / "server-started").touch()  # this run's directory: what the outer test checks
    return "server"


@pytest.fixture
def through_another(server):
    return server


@tiers.needs("system", "builds an image")  # above @pytest.fixture: the same declaration
@pytest.fixture(scope="session")
def image():
    return "image"


@pytest.fixture(scope="session")
@tiers.needs("system", "starts a control plane")
def control_plane():
    return "plane"


@pytest.fixture
def through_the_plane(control_plane):
    return control_plane
"""

TESTS = """
import pytest

def test_unmarked_with_server(server): pass

def test_unmarked_through_another(through_another): pass

def test_unmarked_plain(): pass

@pytest.mark.integration
def test_integration_with_server(server): pass

@pytest.mark.integration
def test_integration_with_image(image): pass

@pytest.mark.system
def test_system_with_both(server, image): pass

@pytest.mark.system
def test_system_with_plane(control_plane): pass

@pytest.mark.system
def test_system_through_the_plane(through_the_plane): pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    markers = "".join(f"    {m}\n" for m in ("unit", "integration", "system", "cluster"))
    pytester.makeini(f"[pytest]\naddopts = --strict-markers\nmarkers =\n{markers}")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def test_a_test_not_marked_for_its_fixtures_tier_is_refused(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "unmarked_with_server")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_unmarked_with_server is a unit test, but its fixtures need the integration tier: "
            "`server` starts a server (integration). Mark it `@pytest.mark.integration`*"
        ]
    )
    assert not (suite.path / "server-started").exists(), "the refused test's fixture ran"


def test_the_refusal_sees_fixtures_used_through_others(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "through_another")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*its fixtures need the integration tier: `server` starts a server*"])


def test_a_tier_may_use_its_own_and_lower_tiers_only(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "integration or system")
    result.assert_outcomes(passed=4, errors=1)
    assert (suite.path / "server-started").exists(), "the allowed tests' fixture did not run"
    result.stdout.fnmatch_lines(
        ["*test_integration_with_image is a integration test, but its fixtures need the system tier: `image`*"]
    )


def test_an_unmarked_test_is_unit(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "no:cacheprovider", "-m", "unit", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_suite.py::test_unmarked_with_server", "*3/8 tests collected (5 deselected)*"])
    result = suite.runpytest("-p", "no:cacheprovider", "-m", "unit", "-k", "plain")
    result.assert_outcomes(passed=1)


def test_a_test_using_a_cluster_fixture_is_cluster(suite: pytest.Pytester) -> None:
    """By the fixtures it uses, through others too: `system and not cluster` (the system session) never starts one."""
    result = suite.runpytest("-p", "no:cacheprovider", "-m", "system and cluster", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_system_with_plane",
            "test_suite.py::test_system_through_the_plane",
            "*2/8 tests collected (6 deselected)*",
        ]
    )
    result = suite.runpytest("-p", "no:cacheprovider", "-m", "system and not cluster", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_suite.py::test_system_with_both", "*1/8 tests collected (7 deselected)*"])


def test_two_tiers_on_one_test_are_refused(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    unit\n    integration\n    system\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("import pytest\n\n@pytest.mark.integration\n@pytest.mark.system\ndef test_both(): pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*test_both is marked with more than one tier: ?'integration', 'system'?"])


def test_a_fixture_needs_a_tier_above_unit() -> None:
    with pytest.raises(ValueError, match="one of"):
        tiers.needs("unit", "nothing")
    with pytest.raises(ValueError, match="one of"):
        tiers.needs("cluster", "a typo")
