"""Histories are kept by age and size, failed ones longer, and a pruned one is named as such
(a crashed job's history vanished after 20 other runs, silently)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monarch._history import _runs as _history


def make(root: Path, job: str, *, days_ago: float, state: str, mb: float = 0.0) -> Path:
    path = root / "history" / job
    (path / "logs").mkdir(parents=True)
    started = time.time() - days_ago * 86400
    info = {"job_id": job, "pid": 1, "hostname": "elsewhere-not-this-host", "started": started,
            "ended": None if state == "crashed" else started + 60,
            "exit_code": {"finished": 0, "failed": 1}.get(state)}
    if state == "crashed":
        info["hostname"] = None  # this host, a dead pid: crashed
        info["pid"] = 2 ** 22 + 7
    (path / "job.json").write_text(json.dumps(info))
    (path / "logs" / "0.parquet").write_bytes(b"\0" * int(mb * 1e6))
    return path


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MONARCH_RUN_DIR", str(tmp_path))
    return tmp_path


def test_age_keeps_failed_and_crashed_twice_as_long(root: Path) -> None:
    make(root, "clean-old", days_ago=8, state="finished")
    make(root, "clean-new", days_ago=1, state="finished")
    make(root, "failed-8d", days_ago=8, state="failed")
    make(root, "crashed-8d", days_ago=8, state="crashed")
    make(root, "failed-15d", days_ago=15, state="failed")
    gone = _history.prune(days=7, total_mb=1000)
    assert sorted(gone) == ["clean-old", "failed-15d"]
    left = sorted(p.name for p in (root / "history").iterdir() if p.is_dir())
    assert left == ["clean-new", "crashed-8d", "failed-8d"]


def test_size_removes_the_oldest_clean_ones_first(root: Path) -> None:
    make(root, "a-clean-oldest", days_ago=3, state="finished", mb=1)
    make(root, "b-failed-old", days_ago=2.5, state="failed", mb=1)
    make(root, "c-clean", days_ago=2, state="finished", mb=1)
    make(root, "d-clean-newest", days_ago=1, state="finished", mb=1)
    gone = _history.prune(days=7, total_mb=2.5)  # 4 MB: two must go
    assert gone == ["a-clean-oldest", "c-clean"]  # the failed one stays, older as it is


def test_a_pruned_job_is_named_as_such(root: Path) -> None:
    make(root, "old-job", days_ago=30, state="failed")
    assert _history.prune(days=7, total_mb=1000) == ["old-job"]
    with pytest.raises(FileNotFoundError, match=r"the history of job old-job was pruned on .* "
                                                r"\(older than 14 days"):
        _history.open_history("old-job")
    env = dict(os.environ, MONARCH_RUN_DIR=str(root))
    for command in (["logs", "--job", "old-job"], ["query", "--job", "old-job",
                                                   "SELECT 1 FROM logs"]):
        out = subprocess.run([sys.executable, "-m", "monarch.cli", *command], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 3 and "was pruned on" in out.stderr, out.stderr


def test_limits_come_from_the_environment_and_refuse_nonsense(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONARCH_HISTORY_KEEP_DAYS", "0.5")
    make(root, "day-old", days_ago=1, state="finished")
    assert _history.prune() == ["day-old"]
    monkeypatch.setenv("MONARCH_HISTORIES_MB", "nope")
    with pytest.raises(ValueError, match="MONARCH_HISTORIES_MB='nope'"):
        _history.prune()


def test_an_ended_historys_size_is_the_one_its_writer_noted(root: Path) -> None:
    """Pruning reads an ended history's size from its `job.json` (its writer notes it at the
    end) instead of walking its files at each job's start; a crashed one's is counted."""
    noted = make(root, "a-noted", days_ago=2, state="finished")  # empty files, 3 MB noted
    info = json.loads((noted / "job.json").read_text())
    (noted / "job.json").write_text(json.dumps({**info, "bytes": 3_000_000}))
    make(root, "b-crashed", days_ago=1.5, state="crashed", mb=2)  # no note: counted
    make(root, "c-clean", days_ago=1, state="finished", mb=1)
    assert _history.prune(days=7, total_mb=3.5) == ["a-noted"]  # 6 MB by the note: it goes
    assert _history.prune(days=7, total_mb=2.5) == ["c-clean"]  # 3 MB with the crashed one


def test_a_job_that_ends_notes_its_historys_size(tmp_path: Path) -> None:
    from monarch._controller._history_writer import HistoryWriter
    from monarch.telemetry import Store

    job = type("Job", (), {"store": Store(), "job_id": "j1", "hostname": "h", "started": 1.0})()
    writer = HistoryWriter(job, tmp_path / "j1", 10**8)
    (tmp_path / "j1" / "logs").mkdir()
    (tmp_path / "j1" / "logs" / "0.parquet").write_bytes(b"x" * 1234)
    writer.close(None, 0)
    info = json.loads((tmp_path / "j1" / "job.json").read_text())
    assert info["ended"] is not None and info["bytes"] >= 1234
