"""Smoke test: bench/bench_api.py --quick runs against our monarch and reports every row.

It checks that the benchmark runs and cleans up, never how fast anything is (MISSION §8: speed is
measured by the benchmark, not by timed tests). `run.py`'s own logic (ratios, failures,
leftover processes) is checked with no benchmark run at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "bench_api.py"
sys.path.insert(0, str(ROOT / "bench"))
import run as bench_run  # noqa: E402 - bench/run.py, importable once its folder is on the path

ROWS = [
    "spawn_4procs_first_answer_s",
    "call_one_p50_us",
    "call_one_p99_us",
    "rpc_floor_socketpair_p50_us",
    "rpc_floor_zmq_p50_us",
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
    "weights_sync_256MiB_4gen_GBps",
    "death_to_error_ms",
    "death_to_supervise_ms",
    "call_one_p50_telemetry_on_us",
    "call_one_p50_telemetry_off_us",
    "tensor_chain_ops_per_s",
    "tensor_reduce_64MiB_4procs_GBps",
    "gloo_allreduce_64MiB_4procs_GBps",
    "controller_cpu_s_per_1k_casts_4actors",
    "spawn_32procs_first_answer_s",
    "call_64actors_p50_us",
    "broadcast_64actors_casts_per_s",
    "controller_cpu_s_per_1k_casts_64actors",
]


@pytest.mark.timeout(280)
def test_bench_api_quick_reports_every_row() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--deadline", "220"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=250,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["_errors"] == {}
    assert os.path.samefile(result["_meta"]["monarch"], ROOT / "monarch")
    for row in ROWS:
        assert result[row] > 0, row
    documented = readme_patterns()
    undocumented = [k for k in result if not k.startswith("_")
                    and not any(p.fullmatch(k) for p in documented)]
    assert not undocumented, f"rows missing from bench/README.md's table: {undocumented}"


def readme_patterns() -> list:
    """The metric names of bench/README.md's table (`a_{x,y}_*` written as patterns)."""
    import re

    table = (ROOT / "bench" / "README.md").read_text().split("## What each row measures")[1]
    names = []
    for line in table.splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`([A-Za-z0-9_{},*]+)`", line.split("|")[1])
    def pattern(name: str) -> re.Pattern:
        text = re.escape(name).replace(r"\*", ".*")
        text = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace(",", "|") + ")", text)
        return re.compile(text)
    return [pattern(n) for n in names]


def test_rows_of_different_mechanisms_get_no_ratio() -> None:
    rows = {r["metric"]: r for r in bench_run.table_rows(
        {"call_one_p50_us": 100.0, "rdma_read_1MiB_GBps": 6.0, "memcpy_1MiB_GBps": 9.0},
        {"call_one_p50_us": 400.0, "rdma_read_1MiB_GBps": 1.0, "memcpy_1MiB_GBps": 9.0})}
    assert rows["call_one_p50_us"]["ratio"] == 0.25 and rows["call_one_p50_us"]["met"] is True
    assert rows["rdma_read_1MiB_GBps"]["ratio"] is None
    assert rows["memcpy_1MiB_GBps"]["ratio"] is None
    table = bench_run.markdown(list(rows.values()))
    assert "| rdma_read_1MiB_GBps | 6 | 1 | n/a [1] |" in table
    assert "[1] no ratio: ours: cross-memory attach" in table


def test_run_fails_when_a_side_fails(tmp_path) -> None:
    """A side that cannot run makes `run.py` exit 1 and say why."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--skip", "ours",
                          "--ref", "/bin/false", "--rounds", "1", "--timeout", "60"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED: monarch round 1 exited 1" in out.stderr
    assert "FAILED: monarch measured nothing" in out.stderr


def test_sweep_finds_processes_that_left_the_group() -> None:
    """What a run starts in a session of its own (as our zygote does) is found by the marker
    in its environment, reported and killed."""
    marker = f"sweep-test-{os.getpid()}"
    stray = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**os.environ, bench_run.MARKER: marker})
    try:
        gone_group = subprocess.Popen(["true"], start_new_session=True)
        gone_group.wait()
        assert bench_run._sweep(gone_group.pid, marker, "test") == [stray.pid]
        assert stray.wait(timeout=30) == -9
        assert bench_run._sweep(gone_group.pid, marker, "test") == []
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()


def test_telemetry_micro_quick_prints_every_row() -> None:
    """bench/telemetry_micro.py runs (it had rotted once: it imported helpers the runtime no
    longer has) and prints a figure for each of its rows, the log ingest at a full book too."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "telemetry_micro.py"), "--quick"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = [line for line in done.stdout.splitlines() if line.rstrip().endswith("µs")]
    assert len(figures) == 10, done.stdout
    assert any(line.startswith("Store.ingest of a log line, book full") for line in figures)
