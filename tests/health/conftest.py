"""Fixtures shared by the sidecar process tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.canary import make_baseline
from tests.support.injector import AnswererServer, CanaryAnswerer


@pytest.fixture
def answerer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[CanaryAnswerer, AnswererServer, Path]]:
    """A fake answerer that gives the right answers of a baseline (the module's SEED and N), the server around it
    and the baseline's path. Failure injection only: what a real vLLM cannot be told to answer."""
    base = make_baseline(seed=request.module.SEED, num_problems=request.module.N)
    path = tmp_path / "baseline.json"
    base.save(path)
    a = CanaryAnswerer(base)
    server = AnswererServer(a)
    try:
        yield a, server, path
    finally:
        server.close()
