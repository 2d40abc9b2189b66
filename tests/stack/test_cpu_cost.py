"""tests/support/cpu_cost.py: the machine's busy time from /proc/stat, and a real pytest session under the plugin that
counts a test's CPU in that test's call (at least what it burned: the figures are machine-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cpu_cost import busy_seconds

REPO = Path(__file__).resolve().parents[2]

STAT = """cpu  1000 200 300 9000 400 50 60 70 0 0
cpu0 500 100 150 4500 200 25 30 35 0 0
intr 1 2 3
"""


def test_busy_is_user_nice_system_irq_softirq_not_idle_iowait_or_steal() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    assert busy_seconds(STAT) == (1000 + 200 + 300 + 50 + 60) / hz
    assert busy_seconds() > 0


def test_a_test_that_burns_cpu_is_charged_for_it(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text(
        "import time\n"
        "def test_burn():\n"
        "    end = time.process_time() + 1.0\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "def test_sleep():\n"
        "    time.sleep(0.2)\n"
    )
    out = tmp_path / "cost.json"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.cpu_cost", f"--cpu-cost={out}", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    phases = json.loads(out.read_text())["phases"]
    burn = [p for p in phases if p["test"].endswith("test_burn") and p["phase"] == "call"]
    assert len(burn) == 1 and burn[0]["cpu_s"] >= 0.9, phases
    assert "machine CPU per test" in r.stdout and "test_burn.py::test_burn" in r.stdout, r.stdout
    # The costliest first.
    table = r.stdout.split("machine CPU per test", 1)[1].splitlines()
    assert next(line for line in table if "::test_" in line).endswith("test_burn"), table
