"""`monarch jobs` with Slurm allocation records when Slurm is slow or gone: one bounded query
for all of them (it waited twice per record, 18 s each: 72 s for two records)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)  # three records: the old code waited 180 s here


def records(root: Path, job_ids: list[str]) -> None:
    for n, job_id in enumerate(job_ids):
        folder = root / "allocations" / f"slurm-2026-{n}"
        folder.mkdir(parents=True)
        (folder / "allocation.json").write_text(json.dumps({
            "id": folder.name, "type": "SlurmJob", "slurm_job_id": job_id,
            "meshes": {"trainers": 1}, "created": 1.0 + n}))


def jobs(root: Path, bin_dir: Path) -> list[dict]:
    env = dict(os.environ, MONARCH_RUN_DIR=str(root),
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = subprocess.run([sys.executable, "-m", "monarch.cli", "jobs", "--json"], env=env,
                         capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    return [r for r in json.loads(out.stdout) if r["kind"] == "allocation"]


def fake_squeue(bin_dir: Path, script: str) -> None:
    """A `squeue` standing in for a Slurm controller that hangs or forgot the jobs (fault
    injection: the real one is in tests/test_slurm.py)."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / "squeue"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_an_unreachable_slurm_is_asked_once_and_said(tmp_path: Path) -> None:
    records(tmp_path, ["101", "102", "103"])
    fake_squeue(tmp_path / "bin", "echo $@ >> \"$(dirname $0)/calls\"\nsleep 30\n")
    rows = jobs(tmp_path, tmp_path / "bin")
    assert [r["state"] for r in rows] == ["unknown"] * 3
    assert all("Slurm did not answer" in r["detail"] for r in rows)
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    assert calls == ["-h -j 101,102,103 -o %i %T"]  # one query for every record


def test_records_of_jobs_that_left_the_queue_are_marked_stale(tmp_path: Path) -> None:
    records(tmp_path, ["201", "202"])
    fake_squeue(tmp_path / "bin", "echo '202 RUNNING'\n")
    assert [(r["detail"], r["state"]) for r in jobs(tmp_path, tmp_path / "bin")] == [
        ("slurm 201", "stale"), ("slurm 202", "running")]
