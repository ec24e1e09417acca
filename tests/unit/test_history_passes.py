"""The history writer's passes: a regular one writes the new records and the snapshots; one
hurried by a filling journal writes only the records (nothing of a snapshot can be lost, and
at 1,024 busy actors the snapshots were a third of each pass)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from waiting import wait_until

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
    while not watcher.history.journals.behind.is_set():
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


def test_a_filling_journal_wakes_the_watcher_at_once(tmp_path, monkeypatch):
    """The pass starts when a journal passes the mark, not at the watcher's next look: a CI
    machine's hiccup between looks lost records of a journal that fills in ~1 s."""
    from monarch._controller import _history_writer

    monkeypatch.setattr(_history_writer, "WATCH_S", 3600.0)  # only the wake can start a pass
    monkeypatch.setattr(_history_writer, "HISTORY_S", 3600.0)
    store = telemetry.Store(budget=Budget(2_000_000))
    job = SimpleNamespace(store=store, job_id="job-1", hostname="box", started=time.time())
    watcher = Watcher(job, 10.0, lambda: {"hosts": [], "meshes": [], "failures": []})
    watcher.history = HistoryWriter(job, tmp_path, 10**9)
    watcher._thread = threading.Thread(target=watcher._run, daemon=True)
    watcher._thread.start()
    try:
        journal = watcher.history.journals.by_kind["log"]
        i = 0
        while journal.bytes < JOURNAL_HURRY * journal.max_bytes:
            assert not watcher.history.journals.behind.is_set()
            store.add(log(i))
            i += 1
        wait_until(lambda: list((tmp_path / "logs").glob("*.parquet")),
                   "the watcher slept through a filling journal", timeout=30, interval=0.01)
        assert journal.bytes < JOURNAL_HURRY * journal.max_bytes and journal.lost == 0
    finally:
        watcher.close()
    assert not watcher._thread.is_alive()
