"""The history writer's passes: a regular one writes the new records and the snapshots; one
hurried by a filling journal writes only the records (nothing of a snapshot can be lost, and
at 1,024 busy actors the snapshots were a third of each pass)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from monarch import telemetry
from monarch._controller._history_writer import JOURNAL_HURRY, HistoryWriter, Watcher
from monarch.telemetry import LogRecord
from monarch.telemetry._budget import Budget


def log(i: int) -> LogRecord:
    return LogRecord(hlc=i, wall_ns=i, stream="stdout", level="INFO", text=f"line {i} " * 8,
                     tags={"mesh": "trainer", "rank": 0, "proc": "p0"})


def test_a_hurried_pass_writes_the_records_and_leaves_the_snapshots(tmp_path):
    store = telemetry.Store(budget=Budget(2_000_000))
    job = SimpleNamespace(store=store, job_id="job-1", hostname="box", started=time.time())
    topologies = []

    def topology():
        topologies.append(1)
        return {"hosts": [], "meshes": [], "failures": []}

    watcher = Watcher(job, 10.0, topology)
    watcher.history = HistoryWriter(job, tmp_path, 10**9)
    watcher._next_history = time.monotonic() + 3600  # the regular pass is an hour away
    i = 0
    while watcher.history.journals.fill() < JOURNAL_HURRY:
        store.add(log(i))
        i += 1
    watcher.tick()
    assert list((tmp_path / "logs").glob("*.parquet"))  # the lines: written
    assert not (tmp_path / "metrics" / "current.parquet").exists()
    assert not (tmp_path / "actors" / "current.parquet").exists() and not topologies
    assert watcher.history.journals.fill() < JOURNAL_HURRY
    watcher._next_history = 0.0  # the regular pass is due
    watcher.tick()
    assert (tmp_path / "metrics" / "current.parquet").exists()
    assert (tmp_path / "actors" / "current.parquet").exists() and topologies == [1]
    assert watcher._next_history > time.monotonic()
