"""The soak's short mode (`bench/soak.py`, MISSION §10): the RL and fault-tolerant training
workloads with a counting mesh under random kills and pauses for two minutes; it fails when a
call hung, training or routing stopped, a line or span an actor emitted is missing from the
history, memory passed its bound, or a process outlived the job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(600)


def test_two_minutes_of_faults_lose_nothing_hang_nothing_leave_nothing(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "2",
                          "--budget-mb", "16", "--seed", "7"],
                         capture_output=True, text=True, timeout=540, cwd=tmp_path)
    report = out.stdout[out.stdout.find("== soak"):]
    assert out.returncode == 0, report + out.stderr[-2000:]
    assert "PASS" in report
    faults = report.splitlines()[0]
    assert " 0 faults" not in faults, faults
