"""The controller's side of job histories (see `monarch._history._runs`): a watcher thread that,
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
from .._history._runs import JOB_FILE, history_bytes, history_dir, prune
from .._runtime import _malloc
from .._runtime._pids import start_time
from ..telemetry import _arrow, _tables as tables

DEFAULT_HISTORY_MB = 256.0
"""A history's bound unless `MONARCH_HISTORY_MB` says otherwise."""
WATCH_S = 0.5
"""How often the watcher marks stalls."""
TRIM_S = 10.0
"""How often the watcher hands free malloc memory back to the system (`_runtime._malloc`; a
few ms a time)."""
HISTORY_S = 2.0
"""How often it appends to the history: at most this far behind (plus one write)..."""
HISTORY_DUTY = 0.05
"""...or further when writes are slow: a write that took t seconds is followed by one no
sooner than t / HISTORY_DUTY later, so the history never takes more than this share of the
controller's time (its Python holds the GIL that calls and their answers need)."""
COMPACT_FILES = 32
"""A table folder with more small files than twice this has its oldest this many merged."""
MERGED_BYTES = 16 << 20
"""A file this big is not merged again (each merge would rewrite it: the history's whole
size, over and over, in a long job)."""
APPENDED = (("span", "spans", tables.spans), ("log", "logs", tables.logs),
            ("message", "messages", tables.messages),
            ("transfer", "transfers", tables.transfers),
            ("failure", "failures", tables.failures),
            ("status_event", "actor_status_events", tables.status_events))


JOURNAL_HURRY = 0.5
"""A journal this full (of its share of the budget) wakes the watcher for a pass at once: what
does not fit in it is lost to the history. Such a pass writes only the appended tables: the
snapshots (actors, metrics: nothing of theirs can be lost) wait for the next regular pass. At
1,024 busy actors the journals filled every ~2 s, and the snapshots were a third of each pass.
The wake comes from the store as the journal passes the mark (`Journals.behind`): a look every
`WATCH_S` left a journal that fills in ~1.2 s (32 busy actors, 13k calls a second) at 0.9 of
its share, and a CI machine's hiccup lost records; with the wake, peaks of 0.72-0.76. A mark of
0.4 (peaks 0.59-0.71) makes more passes; with it, a fresh-clone run under stress-ng saw the
endurance loop's RSS grow 4.3 MB per 100k calls, past its 4.0 bound (not A/B'd)."""


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
        self.journals = self.store.follow(JOURNAL_HURRY)
        self._cursors = {kind: 0 for kind, _, _ in APPENDED}
        self._tags_json: dict[int, Any] = {}  # the logs table's (`telemetry._tables.logs`)
        self._seq = itertools.count()
        self.lock = threading.Lock()
        """Held while a pass writes, and while a live query reads the files and what is not
        written yet (`sources`): the query sees every record once."""

    @property
    def lost(self) -> int:
        """Records that left the store's journals before they were written."""
        return self.journals.lost

    def statistics(self) -> dict[str, Any]:
        """Where the history stands: its folder, the bytes of its files, the records lost
        before they were written, and the bytes its journals hold unwritten."""
        files = [f for _, t, _ in APPENDED for f in (self.path / t).glob("*.parquet")]
        return {"path": str(self.path), "lost": self.lost, "journal_bytes": self.journals.bytes,
                "files": len(files), "bytes": sum(map(_size, files))}

    def flush(self, actor_rows: list[dict[str, Any]] | None, snapshots: bool = True) -> None:
        """Writes what came since the last flush and, with `snapshots`, the actors (when given)
        and metrics snapshots."""
        with self.lock:
            self.journals.behind.clear()  # what comes after the reads below sets it again
            for kind, table, _ in APPENDED:
                items, cursor, _ = self.journals.since(kind, self._cursors[kind])
                if items:
                    self._write(table, _table(kind, items, self._tags_json),
                                f"{next(self._seq):08d}.parquet")
                self.journals.release(kind, cursor)  # written: the journal may let it go
                self._cursors[kind] = cursor
            if snapshots:
                if actor_rows is not None:
                    self._write("actors", tables.actors(actor_rows), "current.parquet")
                self._write("metrics", tables.metrics(self.store.metrics(by_process=True)),
                            "current.parquet")
            self._rotate()
            self.info["last_write"] = time.time()
            self._write_info()

    def sources(self) -> dict[str, Any]:
        """How a live query makes each appended table (call under `lock`): the Parquet files
        written so far and the store's records not written yet (`_sql.TableSource`)."""
        def source(kind: str, table: str) -> Any:
            def make() -> Any:
                items, _, _ = self.journals.since(kind, self._cursors[kind])
                written = self.path / table
                return (str(written) + "/" if any(written.glob("*.parquet")) else None,
                        _table(kind, items, self._tags_json))
            return make
        return {table: source(kind, table) for kind, table, _ in APPENDED}

    def close(self, actor_rows: list[dict[str, Any]] | None, exit_code: int | None,
              reason: str = "") -> None:
        """The last flush; marks the job as ended (with its exit code and why)."""
        self.flush(actor_rows)
        self.info.update(ended=time.time(), exit_code=exit_code, reason=reason,
                         bytes=history_bytes(self.path))
        self._write_info()

    def _write(self, table: str, data: Any, name: str) -> None:
        import pyarrow.parquet as pq

        folder = self.path / table
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = folder / f".{name}.tmp"
        pq.write_table(data, tmp, use_dictionary=_arrow.repeating(table))
        os.replace(tmp, folder / name)

    def _write_info(self) -> None:
        tmp = self.path / f".{JOB_FILE}.tmp"
        tmp.write_text(json.dumps(self.info))
        os.replace(tmp, self.path / JOB_FILE)

    def _rotate(self) -> None:
        for _, table, _ in APPENDED:
            small = sorted(f for f in (self.path / table).glob("*.parquet")
                           if f.stat().st_size < MERGED_BYTES)
            if len(small) > 2 * COMPACT_FILES:
                self._compact(small[:COMPACT_FILES])
        segments = sorted(((f.stat().st_size, f) for _, t, _ in APPENDED
                           for f in (self.path / t).glob("*.parquet")), key=lambda s: s[1].name)
        total = sum(size for size, _ in segments)
        for size, f in segments:  # oldest first (names are write order)
            if total <= self.max_bytes:
                break
            f.unlink(missing_ok=True)
            total -= size

    def _compact(self, files: list[Path]) -> None:
        """Merges ``files`` into the first one's name, one row group in memory at a time (all
        of them at once took hundreds of MB at 10k spans a second)."""
        import pyarrow.parquet as pq

        table = files[0].parent.name
        tmp = files[0].parent / f".{files[0].name}.tmp"
        with pq.ParquetWriter(tmp, pq.read_schema(files[0]),
                              use_dictionary=_arrow.repeating(table)) as merged:
            for f in files:
                for batch in pq.ParquetFile(f).iter_batches(use_threads=False):
                    merged.write_batch(batch)
        os.replace(tmp, files[0])
        for f in files[1:]:
            f.unlink(missing_ok=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # compacted meanwhile
        return 0


def _table(kind: str, items: list[Any], tags_json: dict[int, Any]) -> Any:
    """The Arrow table of journal items of ``kind`` (span and log items are chunks;
    `tags_json` keeps each log tags dict's JSON from pass to pass)."""
    convert = next(convert for k, _, convert in APPENDED if k == kind)
    if kind == "span":
        return convert([(c, 0) for c in items])
    return convert(items, tags_json) if kind == "log" else convert(items)


class Watcher:
    """The watcher thread: stalls (``stalled_handlers``, stall events) and the history."""

    def __init__(self, job: Any, stall_s: float, topology: Callable[[], dict[str, Any]]) -> None:
        self.job, self.stall_s, self._topology = job, stall_s, topology
        self.history: HistoryWriter | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_history = 0.0
        self._next_trim = time.monotonic() + TRIM_S

    def start(self, history: bool, max_bytes: int = int(DEFAULT_HISTORY_MB * 1e6)) -> Watcher:
        """Starts the thread (and the history, if on, bounded by ``max_bytes``)."""
        if history:
            try:
                self.history = HistoryWriter(self.job, history_dir(self.job.job_id), max_bytes)
            except OSError as exc:
                print(f"monarch: no job history: {exc}", file=sys.stderr)
        self._thread = threading.Thread(target=self._run, name="monarch-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        if self.history is not None:
            # on this thread, not at the job's start: the first spawn does not wait for it
            days, total_mb = getattr(self.job, "prune_limits", (None, None))
            try:
                prune(days, total_mb, spare=self.job.job_id)
            except OSError as exc:
                print(f"monarch: old job histories not pruned: {exc}", file=sys.stderr)
            import pyarrow.parquet  # noqa: F401 - here, at the job's start, not in its first
            # pass among the calls: the import holds the GIL for ~0.1 s
            self._next_history = time.monotonic() + HISTORY_S  # the first pass: a full one
        wake = self._stop if self.history is None else self.history.journals.behind
        while not self._stop.is_set():
            wake.wait(WATCH_S)  # a look every WATCH_S, or at once when a journal fills
            if self._stop.is_set():
                break
            self.tick()

    def tick(self) -> None:
        """One pass: who watches (`_watched`), stalls, then the history; every `TRIM_S`, free
        memory back to the system (`_runtime._malloc.trim`)."""
        try:
            if time.monotonic() >= self._next_trim:
                self._next_trim = time.monotonic() + TRIM_S
                _malloc.trim()
            watched = getattr(self.job, "watched", None)
            if watched is not None:  # the procs' pace of log lines follows who watches
                watched.look()
            stalled = self.job.store.check_stalls(self.stall_s)
            telemetry.process_recorder().metrics.set(("stalled_handlers",), stalled)
            if self.history is None:
                return
            began = time.monotonic()
            if began >= self._next_history:
                self.history.flush(self._rows())
                took = time.monotonic() - began
                self._next_history = began + max(HISTORY_S, took / HISTORY_DUTY)
            elif self.history.journals.behind.is_set():
                self.history.flush(None, snapshots=False)
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive a bad pass
            print(f"monarch: watcher: {type(exc).__name__}: {exc}", file=sys.stderr)
            self._stop.wait(WATCH_S)  # a failing write (a full disk) is retried at a pace

    def _rows(self) -> list[dict[str, Any]] | None:
        try:
            from ._admin_views import actor_rows

            return actor_rows(self._topology())
        except Exception:  # noqa: BLE001 - the loop is closing: keep the last snapshot
            return None

    def close(self, exit_code: int | None = None, reason: str = "") -> None:
        """Stops the thread; the history gets its last records and its end."""
        self._stop.set()
        if self.history is not None:
            self.history.journals.behind.set()  # wakes the thread now
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.history is not None:
            try:
                self.history.close(self._rows(), exit_code, reason)
            except OSError as exc:
                print(f"monarch: job history not closed: {exc}", file=sys.stderr)
