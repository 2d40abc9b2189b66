"""buildah's transient failures: it stops before it runs anything when the kernel refuses to seal the memfd copy
of itself (`buildah.TRANSIENT`), and the same invocation is run again, at most `TRIES` times in all; any other
failure is returned (or raised) at once, as before. `Buildah.run` takes the command's output from files, not
buildah's stdio relay, and runs again a `buildah run` that returned 0 without starting the command.

Failure injection: the kernel's EBUSY cannot be had on demand, so a wrapper named `buildah`, first on PATH, answers
the first calls of one subcommand as buildah 1.28.2 does then (the message on stderr, exit 1; or, for the run that
never started, nothing and exit 0) and hands every other call to the real buildah, on an empty store of the test's
own."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import TRANSIENT, TRIES, Buildah, BuildahError, BuildFailed

from tests.support.buildah_store import empty_store

WRAPPER = """#!/bin/sh
# Failure injection (tests/docker/test_buildah_transient.py): the first {fails} calls of `buildah {sub}` fail as
# {message!r} (exit {status}); every call is counted in {calls}.
for a in "$@"; do case "$a" in run|bud|from|inspect) sub=$a; break;; esac; done
if [ "$sub" = {sub} ]; then
  echo x >> {calls}
  if [ "$(wc -l < {calls})" -le {fails} ]; then
    [ {status} = 0 ] || {{ printf '%s\\n' {message!r} >&2; echo 'Error: exit status 1' >&2; }}; exit {status}
  fi
fi
exec {real} "$@"
"""


def inject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sub: str, fails: int, message: str, status: int = 1
) -> Path:
    """Put the wrapper first on PATH; returns the file that counts the calls of `buildah sub`."""
    real = shutil.which("buildah")
    assert real, "buildah is missing: run `make setup-base`"
    bindir, calls = tmp_path / "bin", tmp_path / f"{sub}.calls"
    bindir.mkdir()
    wrapper = bindir / "buildah"
    wrapper.write_text(WRAPPER.format(sub=sub, fails=fails, message=message, status=status, calls=calls, real=real))
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return calls


def calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def store(tmp_path: Path) -> Buildah:
    return empty_store(tmp_path / "store")


@pytest.fixture
def image(store: Buildah) -> str:
    """An image with a shell and nothing else: the host's dash and the two libraries it loads, from scratch."""
    ctr = store("from", "scratch").stdout.strip()
    try:
        for path in ("/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
            store("copy", ctr, os.path.realpath(path), "/bin/sh" if path == "/bin/dash" else path)
        store("commit", "--quiet", ctr, "localhost/vllm-rocm-test/sh:1")
    finally:
        store("rm", ctr, check=False)
    return "localhost/vllm-rocm-test/sh:1"


def test_a_run_that_stopped_before_running_is_run_again(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert TRIES > 1, "buildah stopped by TRANSIENT is run again"
    counted = inject(tmp_path, monkeypatch, "run", TRIES - 1, f"Close_Fd {TRANSIENT}")
    with store.container(image) as ctr:
        res = store.run(ctr, ["/bin/sh", "-c", "echo ran"])
    assert res.returncode == 0 and res.stdout == "ran\n", res
    assert calls(counted) == TRIES


def test_it_gives_up_after_its_tries_and_says_why(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = inject(tmp_path, monkeypatch, "run", TRIES, f"Close_Fd {TRANSIENT}")
    with store.container(image) as ctr:
        res = store.run(ctr, ["/bin/sh", "-c", "echo ran"])
    assert res.returncode == 1 and TRANSIENT in res.stderr and res.stdout == "", res
    assert calls(counted) == TRIES


def test_another_failure_is_not_run_again(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = inject(tmp_path, monkeypatch, "run", 1, "Close_Fd sealing memfd copy: Operation not permitted")
    with store.container(image) as ctr:
        res = store.run(ctr, ["/bin/sh", "-c", "echo ran"])
    assert res.returncode == 1 and "Operation not permitted" in res.stderr, res
    assert calls(counted) == 1
    # And a command that fails in the container is its own answer, run once.
    with store.container(image) as ctr:
        res = store.run(ctr, ["/bin/sh", "-c", "exit 1"])
    assert res.returncode == 1
    assert calls(counted) == 2


def test_a_run_that_returned_0_without_starting_is_run_again(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = inject(tmp_path, monkeypatch, "run", TRIES - 1, "", status=0)
    with store.container(image) as ctr:
        res = store.run(ctr, ["/bin/sh", "-c", "echo ran; echo warned >&2"])
    assert res.returncode == 0 and res.stdout == "ran\n" and res.stderr.startswith("warned\n"), res
    assert calls(counted) == TRIES


def test_a_run_that_never_starts_raises(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = inject(tmp_path, monkeypatch, "run", TRIES, "", status=0)
    with store.container(image) as ctr, pytest.raises(BuildahError, match="without starting"):
        store.run(ctr, ["/bin/sh", "-c", "echo ran"])
    assert calls(counted) == TRIES


def test_a_command_that_prints_nothing_is_run_once(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = inject(tmp_path, monkeypatch, "run", 0, "")
    with store.container(image) as ctr:
        res = store.run(ctr, ["/bin/sh", "-c", ":"])
    assert (res.returncode, res.stdout) == (0, "") and calls(counted) == 1, res


def dockerfile(tmp_path: Path, image: str, script: str) -> Path:
    """A build context whose Dockerfile runs `script` with the image's shell."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {image}\nRUN {json.dumps(['/bin/sh', '-c', script])}\n")
    return context


def test_a_build_that_stopped_before_running_builds_again_and_keeps_both_logs(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = dockerfile(tmp_path, image, ": > /built")
    counted = inject(tmp_path, monkeypatch, "bud", 1, f"Close_Fd {TRANSIENT}")
    image_id = store.bud(context / "Dockerfile", context, ["localhost/vllm-rocm-test/built:1"], {}, "transient")
    assert store.exists("localhost/vllm-rocm-test/built:1") and image_id
    assert calls(counted) == 2
    text = (store.logs / "transient.log").read_text()
    assert text.count("$ buildah") == 2 and f"{TRANSIENT}: building again, try 2 of {TRIES}" in text, text


def test_a_build_that_fails_otherwise_is_not_built_again(
    store: Buildah, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = dockerfile(tmp_path, image, "exit 3")
    counted = inject(tmp_path, monkeypatch, "bud", 0, f"Close_Fd {TRANSIENT}")
    with pytest.raises(BuildFailed, match="exit 3"):
        store.bud(context / "Dockerfile", context, ["localhost/vllm-rocm-test/failed:1"], {}, "fails")
    assert calls(counted) == 1
