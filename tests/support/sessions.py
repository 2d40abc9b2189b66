"""Which of `make test`'s pytest sessions runs a test (vllm_rocm_stack.testrun starts each with
`-p tests.support.sessions --session NAME`). Every test is in exactly one session, by its tier and path:

- `cluster`: the system tier under tests/kube (they wait for the Kubernetes build, then run the control plane and
  the single-node cluster);
- `system`: the rest of the system tier (images, podman, compose, the `make run` stack), and the integration tests
  of SYSTEM_TOO;
- `main`: everything else (the unit and integration tiers).

SYSTEM_TOO are integration tests that start their own vLLM servers (no session fixture of main's): they balance the
sessions (measured on a fresh clone with a CPU hog: main 37.6 min, the system tier without tests/kube ~30 min).
"""

from __future__ import annotations

import pytest

from tests.support import tiers

NAMES = ("cluster", "system", "main")
CLUSTER = "tests/kube/"
SYSTEM_TOO = ("tests/qualify/test_qualify_live.py",)


def session_of(path: str, tier: str) -> str:
    """The session of a test in `path` (relative to the checkout, /-separated) of `tier`."""
    if tier == "system":
        return "cluster" if path.startswith(CLUSTER) else "system"
    return "system" if tier == "integration" and path in SYSTEM_TOO else "main"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--session",
        choices=NAMES,
        default=None,
        help="run only this session's tests of `make test` (tests/support/sessions.py)",
    )


@pytest.hookimpl(trylast=True)  # after the tiers' hook gave every test its tier
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    name = config.getoption("session")
    if name is None:
        return
    keep, drop = [], []
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix()
        (keep if session_of(path, tiers.tier_of(item)) == name else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
