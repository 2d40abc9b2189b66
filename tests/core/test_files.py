"""`write_atomic`: files another process may be reading at that moment. The containers' config files
(storage.conf, containers.conf, registries.conf) are rewritten each time a test session makes a Podman or Buildah,
while another session's podman may be reading them: CI's run of 16fbd84 failed on a truncated storage.conf ("The
storage 'driver' option must be set"). The qualification report and the canary baseline are read by the sidecar
and the compose gate. A reader must only ever see a whole file, and two writers must not take each other's temp
file."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from vllm_rocm_core.files import write_atomic

_READER = """
import sys, time
path, stop = sys.argv[1], sys.argv[2]
import os
seen = bad = 0
print("ready", flush=True)
while not os.path.exists(stop):
    try:
        text = open(path).read()
    except FileNotFoundError:
        print("missing"); sys.exit(1)
    seen += 1
    if not (text.startswith("[storage]") and text.endswith("\\n")):
        bad += 1
print(seen, bad)
"""


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    conf = tmp_path / "storage.conf"
    texts = [f'[storage]\ndriver = "vfs"\ngraphroot = "/g{i}"\n' + "# pad\n" * 2000 for i in range(2)]
    write_atomic(conf, texts[0], unchanged_stays=True)
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(conf), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
        for i in range(400):
            write_atomic(conf, texts[i % 2], unchanged_stays=True)
        stop.touch()
        out, _ = reader.communicate(timeout=120)
    finally:
        reader.kill()
    seen, bad = map(int, out.split())
    assert seen > 0 and bad == 0, f"the reader saw {bad} partial file(s) in {seen} reads"
    assert conf.read_text() == texts[1]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_unchanged_text_leaves_the_file_alone(tmp_path: Path) -> None:
    conf = tmp_path / "containers.conf"
    write_atomic(conf, "[engine]\n", unchanged_stays=True)
    before = conf.stat()
    time.sleep(0.01)
    write_atomic(conf, "[engine]\n", unchanged_stays=True)
    after = conf.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert oct(after.st_mode & 0o777) == oct(0o644)
    # Without it, the same text is written again: a new file.
    write_atomic(conf, "[engine]\n")
    assert conf.stat().st_ino != before.st_ino


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "registries.conf"
    write_atomic(conf, "old\n")

    def refused(src: str, dst: Path) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr("vllm_rocm_core.files.os.replace", refused)
    with pytest.raises(OSError, match="no space"):
        write_atomic(conf, "new\n")
    assert conf.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["registries.conf"]


def test_writers_at_once_each_replace_the_file_whole(tmp_path: Path) -> None:
    """Two qualify runs (or a run and a baseline refresh) saving one path at once: with a shared `.tmp` name one
    writer renamed the other's half-written file into place, or found its own gone (FileNotFoundError)."""
    path = tmp_path / "report.json"
    texts = [f'{{"writer": {i}, "pad": "{"x" * 20000}"}}\n' for i in range(4)]
    errors: list[BaseException] = []

    def writer(text: str) -> None:
        try:
            for _ in range(200):
                write_atomic(path, text)
                assert path.read_text() in texts
        except BaseException as e:  # noqa: BLE001 - reported by the test thread below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert path.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_the_directory_is_made_and_the_mode_is_set(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "baseline.json"
    write_atomic(path, "{}\n", mode=0o600)
    assert path.read_text() == "{}\n"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
