"""The canary baseline of the real vLLM CPU server, recorded once per session through the real CLI."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.canary import CFG
from tests.support.vllm_server import VllmServer


@pytest.fixture(scope="session")
def baseline_file(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recorded through the real CLI, as an operator would."""
    out = tmp_path_factory.mktemp("baseline") / "baseline.json"
    r = subprocess.run([sys.executable, "-m", "vllm_rocm_health", "baseline", "record", "--out", str(out),
                        "--vllm-url", vllm_server.base_url, "--num-problems", str(CFG["num_problems"]),
                        "--notes", "smollm2 bf16 eager cpu"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return out
