"""Procs' output on the client's own terminal: Monarch's log forwarding (`logging_option`).

Every proc's stdout/stderr lines and `logging` records reach the controller's telemetry store
anyway. Procs of a mesh spawned with `enable_log_forwarding` do not write to the terminal they
inherited: the client prints each of their lines as written (stdout lines on its
`sys.stdout`, stderr lines and warnings on its `sys.stderr`, as the proc would have), wherever
the client's streams point now, and streams them as Monarch's `ProcMesh.logging_option` asks:

- not at all (the default);
- each line as it comes: `[host proc] [rank] text` (`aggregate_window_sec=None`);
- aggregated: every window, identical lines of the window fold into one,
  `[N similar log lines] [ranks 0-3] text`, between `>>> Aggregated Logs (time) >>>` and
  `<<< Aggregated Logs (time) <<<` (colored unless NO_COLOR).

`level` is the level of the procs' root Python logger (set in each proc, like Monarch's;
INFO until changed); every line they write is streamed.
Whatever a window holds is printed when the mode changes, when the mesh stops and when the
job ends: nothing is lost. With `enable_file_capture`, each proc's lines are also appended to
`<dir>/logs/<proc>.log`. One daemon thread serves every mesh, from a store subscription.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from .. import telemetry

STDOUT_STREAMS = frozenset({"stdout"})


@dataclasses.dataclass
class Mode:
    """How one proc mesh's lines reach the client."""

    stream: bool = False
    window: float | None = 3.0


@dataclasses.dataclass
class _Mesh:
    forwarding: bool
    capture: bool
    mode: Mode = dataclasses.field(default_factory=Mode)
    pending: list[Any] = dataclasses.field(default_factory=list)
    window_start: float | None = None


MAX_WINDOW_LINES = 100_000
"""Lines an aggregation window holds at most: a window that fills is printed at once (a mesh
writing 100k lines a second must not hold 300k in a 3 s window)."""


class LogStreamer:
    """Streams the lines of proc meshes to this process's terminal (see the module doc)."""

    def __init__(self, store: telemetry.Store, capture_dir: Path) -> None:
        self._store = store
        self._capture_dir = capture_dir
        self._meshes: dict[str, _Mesh] = {}
        self._lock = threading.Lock()  # guards _meshes and each mesh's pending lines
        self._feed: Any = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._files: dict[str, TextIO] = {}

    # -- the controller's side ----------------------------------------------------------------
    def add_mesh(self, procs: str, forwarding: bool, capture: bool) -> None:
        """A proc mesh was spawned (with the knobs in force then)."""
        with self._lock:
            self._meshes[procs] = _Mesh(forwarding, capture)
        if capture or forwarding:
            self._start()

    def set_mode(self, procs: str, stream: bool, window: float | None) -> bool:
        """Applies `logging_option` to a mesh; False when its forwarding was off at spawn
        (the option then has no effect). What the old mode held is printed first."""
        with self._lock:
            mesh = self._meshes.get(procs)
            if mesh is None or not mesh.forwarding:
                return False
        self.flush(procs)
        with self._lock:
            mesh.mode = Mode(stream, window)
        if stream:
            self._start()
        return True

    def flush(self, procs: str | None = None) -> None:
        """Prints what the windows of `procs` (or of every mesh) hold, after taking in what the
        store has already received."""
        self._drain()
        with self._lock:
            meshes = [(p, m) for p, m in self._meshes.items() if procs in (None, p)]
            taken = [(m, m.pending) for _, m in meshes]
            for _, mesh in meshes:
                mesh.pending, mesh.window_start = [], None
        for mesh, lines in taken:
            self._print_window(lines)

    def forget(self, procs: str) -> None:
        """A proc mesh the job no longer keeps: prints what its window holds and closes its
        procs' capture files."""
        self.flush(procs)
        with self._lock:
            self._meshes.pop(procs, None)
            files = [p for p in self._files if p.rpartition("-")[0] == procs]
            handles = [self._files.pop(p) for p in files]
        for handle in handles:
            handle.close()

    def close(self) -> None:
        """Prints everything held and stops the thread (job end)."""
        self.flush()
        self._stopped.set()
        if self._feed is not None:
            self._feed.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    # -- the streaming thread ---------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._feed = self._store.subscribe(kinds=["log"], maxsize=100_000)
            self._thread = threading.Thread(target=self._run, name="monarch-logstream",
                                            daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            records = self._feed.wait(timeout=self._next_due())
            if records:
                self._take(records)
            self._flush_due()

    def _drain(self) -> None:
        if self._feed is not None:
            self._take(self._feed.poll())

    def _next_due(self) -> float:
        now = time.monotonic()
        with self._lock:
            dues = [m.window_start + m.mode.window - now for m in self._meshes.values()
                    if m.window_start is not None and m.mode.window is not None]
        return max(0.05, min(dues, default=1.0))

    def _take(self, records: list[Any]) -> None:
        now = time.monotonic()
        immediate: list[Any] = []
        full: list[list[Any]] = []
        with self._lock:
            for record in records:
                procs, rank = _proc_of(record)
                mesh = self._meshes.get(procs)
                if mesh is None:
                    continue
                if mesh.capture:
                    self._capture(record)
                if mesh.forwarding and _shown(record):
                    immediate.append((record, record.text))
                mode = mesh.mode
                if not mesh.forwarding or not mode.stream:
                    continue
                if mode.window is None:
                    immediate.append((record, _line(record)))
                else:
                    if mesh.window_start is None:  # a window opens at its first line's source
                        mesh.window_start = now - max(0.0, time.time() - record.wall_ns / 1e9)
                    mesh.pending.append(record)
                    if len(mesh.pending) >= MAX_WINDOW_LINES:  # printed now: bounded memory
                        full.append(mesh.pending)
                        mesh.pending, mesh.window_start = [], None
        for record, line in immediate:
            _write(record, line)
        for lines in full:
            self._print_window(lines)

    def _flush_due(self) -> None:
        now = time.monotonic()
        due = []
        with self._lock:
            for mesh in self._meshes.values():
                window = mesh.mode.window
                if mesh.window_start is not None and window is not None \
                        and now - mesh.window_start >= window:
                    due.append(mesh.pending)
                    mesh.pending, mesh.window_start = [], None
        for lines in due:
            self._print_window(lines)

    def _print_window(self, lines: list[Any]) -> None:
        """One block per stream: the window's identical lines folded."""
        if not lines:
            return
        begun = datetime.datetime.fromtimestamp(lines[0].wall_ns / 1e9)
        ended = datetime.datetime.now()
        for out in (sys.stdout, sys.stderr):
            mine = [r for r in lines if (r.stream in STDOUT_STREAMS) == (out is sys.stdout)]
            if not mine:
                continue
            text = [_paint(f">>> Aggregated Logs ({begun:%Y-%m-%d %H:%M:%S}) >>>", 36)]
            for folded in telemetry.fold(mine, window=None):  # the window is the fold's
                ranks = telemetry.compress_ranks(_proc_of(r)[1] for r in folded.members)
                text.append(f"{_paint(f'[{folded.count} similar log lines]', 33)} "
                            f"[{ranks}] {folded.text}")
            text.append(_paint(f"<<< Aggregated Logs ({ended:%Y-%m-%d %H:%M:%S}) <<<", 36))
            try:
                out.write("\n".join(text) + "\n\n")
                out.flush()
            except (OSError, ValueError):  # a closed terminal must not stop the streaming
                pass

    def _capture(self, record: Any) -> None:
        proc = record.tags.get("proc", "unknown")
        handle = self._files.get(proc)
        if handle is None:
            folder = self._capture_dir / "logs"
            folder.mkdir(parents=True, exist_ok=True)
            handle = self._files[proc] = open(folder / f"{proc}.log", "a", buffering=1)
        handle.write(f"[{record.stream}] {record.text}\n")


def _proc_of(record: Any) -> tuple[str, int | None]:
    """(proc mesh id, rank of the proc in it) of the proc that wrote `record`."""
    proc = record.tags.get("proc") or ""
    procs, _, rank = proc.rpartition("-")
    return procs, int(rank) if rank.isdigit() else None


def _shown(record: Any) -> bool:
    """Whether the proc would have printed it: every stdout/stderr line, and the log records
    Python prints with no handler configured (warnings and worse)."""
    return record.stream != "log" or record.level >= logging.WARNING


def _line(record: Any) -> str:
    from .. import config

    if not config.get("prefix_with_rank"):
        return record.text
    procs, rank = _proc_of(record)
    return f"[{record.tags.get('host', '')} {record.tags.get('proc', '')}] [{rank}] {record.text}"


def _write(record: Any, line: str) -> None:
    out = sys.stdout if record.stream in STDOUT_STREAMS else sys.stderr
    try:
        out.write(line + "\n")
        out.flush()
    except (OSError, ValueError):
        pass


def _paint(text: str, color: int) -> str:
    if os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{color}m{text}\x1b[0m"
