"""A real buildah on an empty store of a test's own (vfs: no mount needed), for the tests of what the builds decide
from the store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import Buildah, BuildahError


def empty_store(root: Path) -> Buildah:
    if shutil.which("buildah") is None:
        pytest.fail("buildah is missing: run `make setup-base` (tools/bootstrap.sh installs it)")
    try:
        return Buildah(root, driver="vfs")
    except BuildahError as e:
        pytest.skip(f"buildah cannot run here: {e}")
