"""The controller's side of job histories (see `monarch._history`): a watcher thread that,
every `WATCH_S`, marks stalled handlers and, every `HISTORY_S` (further apart when writes are
slow, see `HISTORY_DUTY`), appends what the store received since its last pass to the job's
Parquet history.

Each pass writes, per table, one complete Parquet file of the new rows (written to a temporary
name, then renamed: a reader, or a SIGKILL, never sees half a file), and replaces the
``actors`` and ``metrics`` snapshots. Files are compacted (`COMPACT_FILES` small ones into
one) and the oldest are removed past ``MONARCH_HISTORY_MB`` (default 256 MB), so a history
stays bounded however long the job runs.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .. import telemetry
from .._history import JOB_FILE, history_dir, prune
from .._rundir import start_time
from ..telemetry import _tables as tables

WATCH_S = 0.5
"""How often the watcher marks stalls."""
HISTORY_S = 2.0
"""How often it appends to the history: at most this far behind (plus one write)..."""
HISTORY_DUTY = 0.05
"""...or further when writes are slow: a write that took t seconds is followed by one no
sooner than t / HISTORY_DUTY later, so the history never takes more than this share of the
controller's time (its Python holds the GIL that calls and their answers need)."""
COMPACT_FILES = 32
"""A table folder with more files than twice this has its oldest this many merged into one."""
APPENDED = (("span", "spans", tables.spans), ("log", "logs", tables.logs),
            ("message", "messages", tables.messages),
            ("transfer", "transfers", tables.transfers),
            ("failure", "failures", tables.failures),
            ("status_event", "actor_status_events", tables.status_events))


class HistoryWriter:
    """Appends a job's telemetry to its history folder; `flush` often, `close` at the end."""

    def __init__(self, job: Any, path: Path, max_bytes: int) -> None:
        self.job, self.path, self.max_bytes = job, path, max_bytes
        self.store: telemetry.Store = job.store
        path.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.info = {"job_id": job.job_id, "pid": os.getpid(),
                     "pid_start": start_time(os.getpid()), "hostname": job.hostname,
                     "started": job.started, "ended": None, "exit_code": None,
                     "argv": list(sys.argv), "last_write": time.time()}
        self._write_info()
        self.store.follow()
        self._cursors = {kind: 0 for kind, _, _ in APPENDED}
        self._seq = itertools.count()
        self.lost = 0
        """Records that left the store's journal before they were written."""

    def flush(self, actor_rows: list[dict[str, Any]] | None) -> None:
        """Writes what came since the last flush, and the actors and metrics snapshots."""
        for kind, table, convert in APPENDED:
            items, self._cursors[kind], missed = self.store.since(kind, self._cursors[kind])
            self.lost += missed
            if items:
                made = convert([(c, 0) for c in items]) if kind == "span" else convert(items)
                self._write(table, made, f"{next(self._seq):08d}.parquet")
        if actor_rows is not None:
            self._write("actors", tables.actors(actor_rows), "current.parquet")
        self._write("metrics", tables.metrics(self.store.metrics(by_process=True)),
                    "current.parquet")
        self._rotate()
        self.info["last_write"] = time.time()
        self._write_info()

    def close(self, actor_rows: list[dict[str, Any]] | None, exit_code: int | None) -> None:
        """The last flush; marks the job as ended."""
        self.flush(actor_rows)
        self.info.update(ended=time.time(), exit_code=exit_code)
        self._write_info()

    def _write(self, table: str, data: Any, name: str) -> None:
        import pyarrow.parquet as pq

        folder = self.path / table
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / f".{name}.tmp"
        pq.write_table(data, tmp, use_dictionary=tables.repeating(table))
        os.replace(tmp, folder / name)

    def _write_info(self) -> None:
        tmp = self.path / f".{JOB_FILE}.tmp"
        tmp.write_text(json.dumps(self.info))
        os.replace(tmp, self.path / JOB_FILE)

    def _rotate(self) -> None:
        for _, table, _ in APPENDED:
            files = sorted((self.path / table).glob("*.parquet"))
            if len(files) > 2 * COMPACT_FILES:
                self._compact(files[:COMPACT_FILES])
        segments = sorted(((f.stat().st_size, f) for _, t, _ in APPENDED
                           for f in (self.path / t).glob("*.parquet")), key=lambda s: s[1].name)
        total = sum(size for size, _ in segments)
        for size, f in segments:  # oldest first (names are write order)
            if total <= self.max_bytes:
                break
            f.unlink(missing_ok=True)
            total -= size

    def _compact(self, files: list[Path]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        merged = pa.concat_tables([pq.read_table(f) for f in files])
        self._write(files[0].parent.name, merged, files[0].name)
        for f in files[1:]:
            f.unlink(missing_ok=True)


class Watcher:
    """The watcher thread: stalls (``stalled_handlers``, stall events) and the history."""

    def __init__(self, job: Any, stall_s: float, topology: Callable[[], dict[str, Any]]) -> None:
        self.job, self.stall_s, self._topology = job, stall_s, topology
        self.history: HistoryWriter | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_history = 0.0

    def start(self, history: bool) -> Watcher:
        """Starts the thread (and the history, if on)."""
        if history:
            try:
                prune(spare=self.job.job_id)
                mb = float(os.environ.get("MONARCH_HISTORY_MB", "256"))
                self.history = HistoryWriter(self.job, history_dir(self.job.job_id),
                                             int(mb * 1e6))
            except (OSError, ValueError) as exc:
                print(f"monarch: no job history: {exc}", file=sys.stderr)
        self._thread = threading.Thread(target=self._run, name="monarch-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        if self.history is not None:
            import pyarrow.parquet  # noqa: F401 - here, at the job's start, not in its first
            # pass among the calls: the import holds the GIL for ~0.1 s
            self._next_history = time.monotonic() + HISTORY_S  # the first pass: a full one
        while not self._stop.wait(WATCH_S):
            self.tick()

    def tick(self) -> None:
        """One pass: stalls, then the history."""
        try:
            stalled = self.job.store.check_stalls(self.stall_s)
            telemetry.process_recorder().metrics.set(("stalled_handlers",), stalled)
            if self.history is not None and time.monotonic() >= self._next_history:
                began = time.monotonic()
                self.history.flush(self._rows())
                took = time.monotonic() - began
                self._next_history = began + max(HISTORY_S, took / HISTORY_DUTY)
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive a bad pass
            print(f"monarch: watcher: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _rows(self) -> list[dict[str, Any]] | None:
        try:
            from ._admin_views import actor_rows

            return actor_rows(self._topology())
        except Exception:  # noqa: BLE001 - the loop is closing: keep the last snapshot
            return None

    def close(self, exit_code: int | None = None) -> None:
        """Stops the thread; the history gets its last records and its end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.history is not None:
            try:
                self.history.close(self._rows(), exit_code)
            except OSError as exc:
                print(f"monarch: job history not closed: {exc}", file=sys.stderr)
