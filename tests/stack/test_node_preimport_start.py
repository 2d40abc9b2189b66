"""When the system session starts the node's background image import (tests/support/images.py): only for a session
that will start the node, and never at the cost of the session: a probe that fails leaves the import to the node's
start, said in words, with nothing started."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.support import images


def request(*fixturenames: str) -> Any:
    config = SimpleNamespace(stash=pytest.Stash(), pluginmanager=SimpleNamespace(get_plugin=lambda name: None))
    return SimpleNamespace(config=config, session=SimpleNamespace(items=[SimpleNamespace(fixturenames=fixturenames)]))


BUILT = {"by_target": {t: {"image": f"localhost/{t}:x"} for t in images.NODE_TARGETS}}


def test_a_session_without_the_node_starts_nothing() -> None:
    req = request("built_images", "podman")
    assert images.start_node_preimport(req, BUILT) is None
    assert req.config.stash.get(images.PREIMPORT, None) is None


def test_a_failed_size_probe_leaves_the_import_to_the_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(images.kube_node, "refusal", lambda: "")
    monkeypatch.setattr(images.kube_node, "CONTAINERD", "/bin/sh")
    monkeypatch.setattr(images.kube_node, "CTR", "/bin/sh")

    class Broken:
        def __call__(self, *args: str) -> Any:
            raise RuntimeError("podman image inspect: no such image")

    import vllm_rocm_stack.images.podman as podman

    monkeypatch.setattr(podman, "Podman", Broken)
    req = request("node_cluster")
    assert images.start_node_preimport(req, BUILT) is None
    assert req.config.stash.get(images.PREIMPORT, None) is None
    assert "the node imports them at its start" in capsys.readouterr().out


def test_a_deferred_import_without_room_starts_no_containerd(tmp_path: Any) -> None:
    """A pre-import deferred until the Kubernetes build frees its Go caches, when there is still no room then: nothing
    is imported, no containerd runs, and it says so; the node's start imports."""
    pre = images.kube_node.Preimport(
        {"localhost/x:1": "podman:localhost/x:1"}, tmp_path / "state", root=tmp_path / "store", room=lambda: "no room"
    ).start()
    said = pre.wait()
    assert said == "not pre-imported (no room): the node imports them at its start"
    assert pre._containerd is None and not (tmp_path / "store").exists()


def test_room_after_the_build_says_how_short_the_disk_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    # A build and a removal of their own, neither running (never the checkout's: `make test` builds beside this).
    lock, cache = tmp_path / ".build.lock", tmp_path / "go"
    monkeypatch.setattr(images, "WORK", tmp_path)
    assert images.room_after_the_build(0, lock, cache) == ""
    why = images.room_after_the_build(10**18, lock, cache)
    assert "GB free after the Kubernetes build, the import wants 1000000000.0 GB" in why


def test_a_streamed_import_needs_every_image_and_one_layer_blob_the_largest(tmp_path: Any) -> None:
    """An image that cannot be linked (here: buildah on vfs) is streamed layer by layer (tests/support/
    layered_import.py): the unpacked images, and beside them one blob at a time."""
    answers = {
        ("image", "a"): "100",
        ("history", "a"): '[{"size": 60}, {"size": 0}, {"size": 40}]',
        ("image", "b"): "50",
        ("history", "b"): '[{"size": 50}, {"CreatedBy": "an empty layer, no size"}]',
    }

    class Podman:
        b = SimpleNamespace(driver="vfs")

        def __call__(self, *args: str) -> Any:
            return SimpleNamespace(stdout=answers[(args[0], args[-1])])

    assert images.import_needs(Podman(), ["a", "b"], tmp_path / "containerd") == 150 + 60


def test_a_socket_path_too_long_for_unix_is_refused_before_containerd_starts(tmp_path: Any) -> None:
    """containerd exits at once on a socket path over 107 bytes, with the reason deep in its log (CI's run 31)."""
    state = tmp_path / ("s" * 120)
    with pytest.raises(RuntimeError, match=r"over the 107 a unix socket's path may have"):
        images.kube_node.store_containerd(state, tmp_path / "store")
    assert not state.exists() and not (tmp_path / "store").exists()
