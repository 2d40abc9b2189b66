"""`write_config`: the containers' config files (storage.conf, containers.conf, registries.conf) are rewritten each
time a test session makes a Podman or Buildah, while another session's podman may be reading them. CI run of
16fbd84 failed on a truncated storage.conf ("The storage 'driver' option must be set"): a reader must only ever see
a whole file."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from vllm_rocm_stack.images.buildah import write_config

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
    write_config(conf, texts[0])
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(conf), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
        for i in range(400):
            write_config(conf, texts[i % 2])
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
    write_config(conf, "[engine]\n")
    before = conf.stat()
    time.sleep(0.01)
    write_config(conf, "[engine]\n")
    after = conf.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert oct(after.st_mode & 0o777) == oct(0o644)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "registries.conf"
    write_config(conf, "old\n")

    def refused(src: str, dst: Path) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr("vllm_rocm_stack.images.buildah.os.replace", refused)
    with pytest.raises(OSError, match="no space"):
        write_config(conf, "new\n")
    assert conf.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["registries.conf"]
