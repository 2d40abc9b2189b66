"""`Buildah.exists` and `remove_unused_images`, what a build of the stand-ins decides from. `exists` decides
whether a cached stand-in is rebuilt: only buildah's "image not known" means absent, and any other failure raises,
since a rebuild gives the stand-in a new digest and every image built on it a new key (run 25: a failed inspect
rebuilt debootstrap, and the next build removed the other session's stand-in as stale). `remove_unused_images`
keeps an image a container uses. Real buildah on an empty store of the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import Buildah, BuildahError

from tests.support.buildah_store import empty_store


@pytest.fixture
def store(tmp_path: Path) -> Buildah:
    return empty_store(tmp_path / "store")


def test_an_image_the_store_has_exists_and_one_it_lacks_does_not(store: Buildah) -> None:
    assert not store.exists("localhost/vllm-rocm-test/empty:1")
    container = store("from", "scratch").stdout.strip()
    try:
        store("commit", "--quiet", container, "localhost/vllm-rocm-test/empty:1")
    finally:
        store("rm", container, check=False)
    assert store.exists("localhost/vllm-rocm-test/empty:1")


def test_a_failed_inspect_is_not_taken_for_a_missing_image(store: Buildah) -> None:
    with pytest.raises(BuildahError, match="invalid reference format"):
        store.exists("Not A Reference")


def test_stale_images_in_use_by_a_container_are_kept(store: Buildah) -> None:
    """What `_prune_kind` removes: without --force, which would remove another session's running container too."""
    for name in ("localhost/vllm-rocm-test/used:1", "localhost/vllm-rocm-test/unused:1"):
        container = store("from", "scratch").stdout.strip()
        store("commit", "--quiet", container, name)
        store("rm", container)
    user = store("from", "localhost/vllm-rocm-test/used:1").stdout.strip()
    try:
        kept = store.remove_unused_images(["localhost/vllm-rocm-test/used:1", "localhost/vllm-rocm-test/unused:1"])
        assert kept == ["localhost/vllm-rocm-test/used:1"]
        assert store.exists("localhost/vllm-rocm-test/used:1")
        assert not store.exists("localhost/vllm-rocm-test/unused:1")
        assert user in store("containers", "--format", "{{.ContainerName}}").stdout.split()
    finally:
        store("rm", user, check=False)
