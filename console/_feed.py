"""Where the console's data comes from: the admin client, polled on threads.

The UI never waits on the network. A poll thread asks the client for the job, topology,
debugger sessions, spans and transfers every `interval` seconds and keeps the newest `Snapshot`
in a slot; a log thread fetches the job's new log lines into a bounded queue. The app takes
both on its own timer, so a slow or stuck controller only makes the data older, never the
screen slower.

Logs are fetched in pages (`logs(since_hlc=...)` four times a second) rather than read line
by line from the live feed: in a process whose main thread is busy drawing, every blocking read
waits for the GIL, so a line-per-read feed tops out near 250 lines/s, while a page of a
thousand lines costs one read. Pages overlap by `LOG_OVERLAP_S` (a line reaches the controller
a little after its stamp) and lines already seen are dropped.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from ._model import Snapshot

LOG_OVERLAP_S = 2.0
"""How far back (in HLC time) each log page starts before the newest line seen."""
LOG_PAGE = 5000
"""Lines per page of the log poll."""
SPANS = 100
"""The newest spans each poll asks for: what the span pane shows (`SpanPane.show`); at 1,024
busy actors they are all new at every poll, and 200 of them were a tenth of the poll's cost
to the controller."""


class Client(Protocol):
    """What the console uses of `monarch.admin.AdminClient` (every value plain JSON data)."""

    def job(self) -> dict[str, Any]: ...

    def topology(self) -> dict[str, Any]:
        """The whole topology (`AdminClient.topology` also takes `since`, the last one: the
        feed then gets only what changed, see `monarch.telemetry._topology_delta`; and
        `rows`, the meshes whose actors to send, every other folded)."""

    def spans(self, trace_id: str | None = None, mesh: str | None = None,
              limit: int = 200) -> list[dict[str, Any]]: ...

    def transfers(self, window: float = 10.0) -> dict[str, Any]: ...

    def logs(self, mesh: str | None = None, rank: int | None = None, text: str | None = None,
             since_hlc: int | None = None, limit: int = 500) -> list[dict[str, Any]]: ...

    def sessions(self) -> list[dict[str, Any]]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class FeedStatistics:
    """A snapshot of the feed's counters."""

    polls: int
    poll_errors: int
    last_poll_ms: float
    logs_received: int
    logs_dropped: int
    log_errors: int


class Feed:
    """Polls `client` on a thread and follows its logs on another.

    Args:
        client: the admin client (or anything with the `Client` methods).
        interval: seconds between polls.
        log_limit: records kept waiting for the app; older ones are dropped (and counted).
        backfill: log records fetched before following.
    """

    def __init__(self, client: Client, interval: float = 1.0, log_limit: int = 20000,
                 backfill: int = 500, log_interval: float = 0.25) -> None:
        self.client = client
        self.interval = interval
        self._backfill = backfill
        self._log_interval = log_interval
        self._seen: dict[tuple[Any, Any], int] = {}  # (hlc, proc) of lines in the overlap
        self._lock = threading.Lock()
        self._newest: Snapshot | None = None  # guarded by _lock; taken by the app
        self._logs: deque[dict[str, Any]] = deque(maxlen=log_limit)  # guarded by _lock
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        parameters = inspect.signature(client.topology).parameters
        self._since, self._rows = "since" in parameters, "rows" in parameters
        self._topology: dict[str, Any] | None = None  # the last one polled (poll thread only)
        self.focus: tuple[str, int] | None = None
        """(mesh id, rank) of the actor whose detail each poll also fetches (set by the app)."""
        self.rows: frozenset[str] | None = None
        """The meshes (ids) whose actors each poll fetches, every other folded (a summary by
        host: `AdminClient.topology(rows=...)`); None: every mesh's actors (set by the app).
        A client without `rows` (a finished job's history) always sends every actor."""
        self._stats = {"polls": 0, "poll_errors": 0, "last_poll_ms": 0.0, "logs_received": 0,
                       "logs_dropped": 0, "log_errors": 0}

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Starts the poll and log threads (daemons: they never keep the console alive)."""
        for name, target in (("monarch-top-poll", self._poll_loop),
                             ("monarch-top-logs", self._log_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Asks the threads to end (a request in flight ends with its timeout, or with the
        process: they are daemons)."""
        self._stopped.set()
        self._wake.set()

    def poke(self) -> None:
        """Polls now instead of at the next interval."""
        self._wake.set()

    # -- what the app takes ----------------------------------------------------------------
    def take(self) -> Snapshot | None:
        """The newest snapshot not taken yet, or None."""
        with self._lock:
            snap, self._newest = self._newest, None
        return snap

    def take_logs(self) -> list[dict[str, Any]]:
        """The log records that arrived since the last call."""
        with self._lock:
            records = list(self._logs)
            self._logs.clear()
        return records

    def statistics(self) -> FeedStatistics:
        """The feed's counters now."""
        with self._lock:
            return FeedStatistics(**self._stats)  # type: ignore[arg-type]

    # -- polling ---------------------------------------------------------------------------
    def poll_once(self) -> Snapshot:
        """One poll of everything the screen shows (errors are reported in the snapshot)."""
        started = time.perf_counter()
        calls: dict[str, Callable[[], Any]] = {
            "job": self.client.job, "topology": self._poll_topology,
            "sessions": self.client.sessions, "spans": lambda: self.client.spans(limit=SPANS),
            "transfers": lambda: self.client.transfers(window=10.0)}
        focus, actor = self.focus, getattr(self.client, "actor", None)
        if focus is not None and actor is not None:
            calls["detail"] = lambda: actor(*focus, 32)
        answers = _at_once(calls)
        parts: dict[str, Any] = {}
        errors = []
        for name in calls:
            value, exc = answers[name]
            if exc is None:
                parts[name] = value
            elif name != "detail":  # the actor may be gone: the tree says so
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
        if "job" not in parts:  # the controller is gone or unreachable: that error alone
            errors = errors[:1]
            parts = {}
        detail = parts.get("detail")
        snap = Snapshot(parts.get("job"), parts.get("topology"), parts.get("sessions") or [],
                        parts.get("spans") or [], parts.get("transfers"),
                        "; ".join(errors) or None, time.monotonic(), detail)
        with self._lock:
            self._stats["polls"] += 1
            self._stats["poll_errors"] += bool(errors)
            self._stats["last_poll_ms"] = (time.perf_counter() - started) * 1000
        return snap

    def _poll_topology(self) -> dict[str, Any]:
        """The topology; from a client that can, only what changed since the last poll."""
        asked: dict[str, Any] = {"rows": self.rows} if self._rows else {}
        if not self._since:
            return self.client.topology(**asked)
        self._topology = self.client.topology(since=self._topology,  # type: ignore[call-arg]
                                              **asked)
        return self._topology

    def _poll_loop(self) -> None:
        due = time.monotonic()
        while not self._stopped.is_set():
            snap = self.poll_once()
            with self._lock:
                self._newest = snap
            # on a fixed beat, every `interval`: a slow job is polled as often as its answers
            # allow, not at interval + answer time, and the thread's late wake-ups do not add
            # up (0.5 s polls gave 1.93-1.99 refreshes a second, not 2)
            due = max(due + self.interval, time.monotonic())
            if self._wake.wait(max(0.0, due - time.monotonic())):
                due = time.monotonic()  # poked: the beat starts again from this poll
            self._wake.clear()

    # -- logs ------------------------------------------------------------------------------
    def _log_loop(self) -> None:
        last_hlc = 0
        try:
            backfill = self.client.logs(limit=self._backfill) if self._backfill else []
            last_hlc = self._fresh_logs(backfill, last_hlc)
        except Exception:  # noqa: BLE001 - counted; the next pages may work
            self._count("log_errors")
        while not self._stopped.is_set():
            try:
                last_hlc = self._poll_logs(last_hlc)
                self._stopped.wait(self._log_interval)
            except Exception:  # noqa: BLE001 - counted, retried
                self._count("log_errors")
                self._stopped.wait(1.0)

    def _poll_logs(self, last_hlc: int) -> int:
        """Fetches the pages after `last_hlc - LOG_OVERLAP_S`; returns the newest stamp."""
        since = max(last_hlc - int(LOG_OVERLAP_S * 1e9), 0)
        while True:
            page = self.client.logs(since_hlc=since, limit=LOG_PAGE)
            last_hlc = self._fresh_logs(page, last_hlc)
            if len(page) < LOG_PAGE or self._stopped.is_set():
                return last_hlc
            since = page[-1].get("hlc") or since

    def _fresh_logs(self, records: list[dict[str, Any]], last_hlc: int) -> int:
        """Queues the records not seen yet; returns the newest stamp."""
        fresh = []
        for record in records:
            key = (record.get("hlc"), record.get("proc"))
            if key not in self._seen:
                self._seen[key] = record.get("hlc") or 0
                fresh.append(record)
        self._add_logs(fresh)
        newest = max([last_hlc] + [r.get("hlc") or 0 for r in records])
        horizon = newest - int(LOG_OVERLAP_S * 1e9)
        if len(self._seen) > 4 * LOG_PAGE or fresh:
            self._seen = {k: h for k, h in self._seen.items() if h >= horizon}
        return newest

    def _add_logs(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            room = self._logs.maxlen or 0
            dropped = max(len(self._logs) + len(records) - room, 0)
            self._logs.extend(records)
            self._stats["logs_received"] += len(records)
            self._stats["logs_dropped"] += dropped

    def _count(self, key: str) -> None:
        with self._lock:
            self._stats[key] += 1


def _at_once(calls: dict[str, Callable[[], Any]]
             ) -> dict[str, tuple[Any, BaseException | None]]:
    """Runs `calls` at once, each on a thread of its own (daemons: a console that quits never
    waits on them); (value, None) or (None, the exception) by name. A poll then takes as long
    as its slowest request, not the sum of all (the controller answers them in parallel)."""
    answers: dict[str, tuple[Any, BaseException | None]] = {}

    def run(name: str, call: Callable[[], Any]) -> None:
        try:
            answers[name] = (call(), None)
        except Exception as exc:  # noqa: BLE001 - the poll reports it
            answers[name] = (None, exc)

    threads = [threading.Thread(target=run, args=item, name=f"monarch-top-{item[0]}",
                                daemon=True) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers
