"""Smoke test: bench/bench_api.py --quick runs against our monarch and reports every row.

It checks that the benchmark runs and cleans up, never how fast anything is (MISSION §8: speed is
measured by the benchmark, not by timed tests). Skipped only while `monarch.actor` is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("monarch.actor")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "bench_api.py"

ROWS = [
    "spawn_4procs_first_answer_s",
    "call_one_p50_us",
    "call_one_p99_us",
    "call_4actors_p50_us",
    "pipelined_call_one_per_s",
    "broadcast_4actors_casts_per_s",
    "bytes_1KiB_oneway_MBps",
    "bytes_64MiB_echo_GBps",
    "tensor_64MiB_oneway_GBps",
    "tensor_64MiB_echo_GBps",
    "memcpy_256MiB_GBps",
    "rdma_read_1MiB_GBps",
    "rdma_write_256MiB_GBps",
    "rdma_tcp_read_256MiB_GBps",
    "rdma_tcp_write_1MiB_GBps",
    "death_to_error_ms",
    "death_to_supervise_ms",
    "call_one_p50_telemetry_on_us",
    "call_one_p50_telemetry_off_us",
]


@pytest.mark.timeout(150)
def test_bench_api_quick_reports_every_row() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--deadline", "110"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["_errors"] == {}
    assert os.path.samefile(result["_meta"]["monarch"], ROOT / "monarch")
    for row in ROWS:
        assert result[row] > 0, row
