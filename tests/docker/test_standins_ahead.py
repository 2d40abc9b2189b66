"""`python -m vllm_rocm_stack.images standins`: the stand-in bases of a stand-in build, made ahead of it (`make test`
runs it beside the vLLM CPU setup). Here with the stand-ins recorded, not made: which bases it asks for, and that
--skip-cpu leaves out the serving stand-in, whose wheels that setup downloads. That it warms the very cache the
build reads is checked on the real store by tests/docker/test_images.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_stack.images import build
from vllm_rocm_stack.images.buildah import BuildahError, ImageRef
from vllm_rocm_stack.images.standin import cpu_release


class RecordedStandIns:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.timings: dict[str, float] = {}

    def _made(self, kind: str) -> ImageRef:
        self.asked.append(kind)
        self.timings[kind] = 1.0
        return ImageRef(name=f"localhost/stand-in/{kind}:key", digest="sha256:" + "0" * 64)

    def python(self) -> ImageRef:
        return self._made("python")

    def vllm(self, release: str) -> ImageRef:
        return self._made(f"vllm-{release}")


class NoStore:
    root = Path("no-store")

    @contextlib.contextmanager
    def idle(self) -> Iterator[bool]:
        yield False  # containers in use: nothing is cleaned


@pytest.fixture
def builder(monkeypatch: pytest.MonkeyPatch) -> build.Builder:
    monkeypatch.setattr(build, "store_lock", contextlib.nullcontext)  # never the real store's lock
    b = build.Builder.__new__(build.Builder)
    b.b, b.bases, b.standins = NoStore(), "stand-in", RecordedStandIns()  # type: ignore[assignment]
    return b


def test_the_suites_targets_ask_for_every_base_once_made(builder: build.Builder) -> None:
    made = builder.prepare_standins(build.suite_targets())
    asked = builder.standins.asked  # type: ignore[attr-defined]
    # The sidecar's final stage and the vLLM Dockerfiles' builder stage stand on the Python stand-in.
    assert f"vllm-{cpu_release()}" in asked and "python" in asked, asked
    assert any(k.startswith("vllm-") and k != f"vllm-{cpu_release()}" for k in asked), "the patched release's base"
    assert made == {k: 1.0 for k in asked}


def test_skip_cpu_leaves_out_only_the_serving_stand_in(builder: build.Builder) -> None:
    builder.prepare_standins(build.suite_targets(), skip_cpu=True)
    asked = builder.standins.asked  # type: ignore[attr-defined]
    assert f"vllm-{cpu_release()}" not in asked, asked
    assert "python" in asked and any(k.startswith("vllm-") for k in asked), asked


def test_pinned_bases_have_no_stand_ins_to_make(builder: build.Builder) -> None:
    builder.bases = "pinned"
    with pytest.raises(BuildahError, match="only for --bases stand-in"):
        builder.prepare_standins(build.suite_targets())
