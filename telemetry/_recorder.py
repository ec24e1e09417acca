"""The per-process recorder: bounded buffers the hot paths append to and a shipper drains.

Appending never blocks: a full buffer drops the new record and counts the drop (the count is
shipped as the ``telemetry_dropped`` metric). Spans and log lines are buffered as tuples in wire
field order and only become lists at `Recorder.drain`, which runs on the shipping thread.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ._actors import pack_columns
from ._batch import BATCH_VERSION, encode_batch
from ._crashlog import CrashLog, recover
from ._logchunk import TagNumbers, wire_columns
from ._metrics import MetricsTable
from ._records import ActorStatus, FailureRecord, MetricPoint, TransferRecord
from ._sites import Tallies, drain_site_spans

KINDS = ("span", "log", "transfer", "failure")
_TEXT = operator.itemgetter(4)  # a buffered line's text


@dataclasses.dataclass(frozen=True, slots=True)
class RecorderStatistics:
    """A snapshot of a recorder: records waiting to be drained and records dropped, per kind."""

    pending: dict[str, int]
    dropped: dict[str, int]


class Recorder:
    """Bounded telemetry buffers of one process.

    Args:
        max_spans: spans buffered before new ones are dropped.
        max_logs: log lines/records buffered before new ones are dropped.
        max_transfers: transfer records buffered before new ones are dropped.
        max_failures: failure records buffered before new ones are dropped.
        max_log_bytes: text of log lines buffered before new ones are dropped.
    """

    def __init__(self, *, max_spans: int = 16384, max_logs: int = 16384,
                 max_transfers: int = 4096, max_failures: int = 1024,
                 max_log_bytes: int = 8 << 20) -> None:
        self._caps = {"span": max_spans, "log": max_logs, "transfer": max_transfers,
                      "failure": max_failures}
        self._queues: dict[str, deque[Any]] = {kind: deque() for kind in KINDS}
        self._spans = self._queues["span"]
        self._site_spans: deque[Any] = deque()  # ended site spans; counted as kind "span"
        self._tallies = Tallies()  # per invocation site: its spans drained or dropped
        self._tag_numbers = TagNumbers()  # the lines' tags objects, numbered (item 14)
        self._logs = self._queues["log"]
        self._max_spans, self._max_logs = max_spans, max_logs
        self._max_log_bytes = max_log_bytes
        self._log_bytes = 0  # text waiting; unlocked adds may miss a few, `drain` recounts
        self._drop_lock = threading.Lock()
        self._dropped = dict.fromkeys(KINDS, 0)  # guarded by _drop_lock
        self._drain_lock = threading.Lock()  # one drainer at a time (the shipper, a flush)
        self._statuses: dict[str, list[Any]] = {}  # actor -> newest status wire; _drain_lock
        self._messages: deque[list[Any]] = deque()  # flight-recorder groups to ship
        self._message_count = 0  # entries in them
        self._max_messages = max_logs
        self._collectors: list[Callable[[], list[MetricPoint]]] = []
        self.metrics = MetricsTable()
        self.resource: dict[str, Any] = {"pid": os.getpid()}
        self.crash: CrashLog | None = None
        """Where accepted lines and user spans are also written (see `keep_for_crash`)."""
        self._crash_clear = True  # the last drain left no line or user span behind
        self.on_live: Callable[[], None] | None = None
        """Called once (then cleared) at the next live record (a log line, a failure, a
        transfer): a shipper that looks seldom while idle sets it to look at once."""

    def keep_for_crash(self, stem: str) -> None:
        """Also writes every accepted log line and user span to files that survive this
        process's death (`monarch.telemetry._crashlog`), until `drain` shipped them."""
        self.crash = CrashLog(stem)

    def configure(self, resource: dict[str, Any]) -> None:
        """Sets the resource tags (host, proc, pid, job, ...) added to everything shipped."""
        self.resource = {"pid": os.getpid(), **resource}

    @property
    def source(self) -> str:
        """This process's name in records: the ``proc`` tag, else ``pid-<pid>``."""
        return str(self.resource.get("proc") or f"pid-{self.resource.get('pid')}")

    def add_span(self, fields: tuple[Any, ...]) -> None:
        """Buffers a finished span given as the first 8 `SpanRecord` fields."""
        if len(self._spans) < self._max_spans:
            if self.crash is not None:  # on file before in the buffer (see _crashlog)
                self.crash.write("span", fields)
            self._spans.append(fields)
        else:
            self.count_dropped("span")

    def add_site_span(self, item: tuple[Any, ...]) -> None:
        """Buffers an ended site span: (site id, trace_id, span_id, parent_span_id, start_ns,
        value, end_ns, outcome), see `monarch.telemetry._sites`.

        A span that does not fit is dropped, but tallied: the invocation metrics the
        controller adds up still count it.
        """
        if len(self._site_spans) < self._max_spans:
            self._site_spans.append(item)
        else:
            self.count_dropped("span")
            self._tallies.add(item)

    def add_log(self, fields: tuple[Any, ...]) -> None:
        """Buffers a log line: (hlc, wall_ns, stream, level, text, tags, trace context or None).

        The tags exclude the resource, which `drain` adds.
        """
        if len(self._logs) < self._max_logs and self._log_bytes < self._max_log_bytes:
            if self.crash is not None:  # on file before in the buffer (see _crashlog)
                self.crash.write("log", fields)
            self._logs.append(fields)
            self._log_bytes += len(fields[4])
            if self.on_live is not None:
                self._live()
        else:
            self.count_dropped("log")

    def add_transfer(self, record: TransferRecord) -> None:
        """Buffers a transfer record."""
        self._add("transfer", record)

    def add_failure(self, record: FailureRecord) -> None:
        """Buffers a failure record."""
        self._add("failure", record)

    def add_actor_status(self, status: ActorStatus) -> None:
        """Buffers an actor's status (a newer one of the same actor replaces it, and carries
        the steps of its life the older one had)."""
        wire = status.to_wire()
        with self._drain_lock:
            older = self._statuses.get(status.actor)
            if older is not None and len(older) > 11 and older[11]:
                wire[11] = older[11] + wire[11]
            self._statuses[status.actor] = wire

    def add_message_group(self, group: list[Any]) -> None:
        """Buffers one actor's handled messages (flight-recorder entries, a `message_group`);
        the entries that do not fit are dropped (counted)."""
        entries = group[4]
        with self._drain_lock:
            room = self._max_messages - self._message_count
            if len(entries) <= room:
                self._messages.append(group)
                self._message_count += len(entries)
                return
            if room > 0:
                self._messages.append([*group[:4], entries[-room:]])
                self._message_count += room
        for _ in range(len(entries) - max(room, 0)):
            self.count_dropped("message")

    def add_collector(self, collect: Callable[[], list[MetricPoint]]) -> None:
        """Registers a function whose metric points are added to every drained batch."""
        self._collectors.append(collect)

    def dropped(self) -> dict[str, int]:
        """Returns how many records of each kind were dropped since the process started."""
        return dict(self._dropped)

    def statistics(self) -> RecorderStatistics:
        """Returns a snapshot: records waiting per kind and records dropped per kind."""
        pending = {k: len(q) for k, q in self._queues.items()}
        pending["span"] += len(self._site_spans)
        return RecorderStatistics(pending, self.dropped())

    def pending(self) -> int:
        """Returns how many records wait to be drained."""
        return (sum(len(q) for q in self._queues.values()) + len(self._site_spans)
                + len(self._statuses) + self._message_count)

    def due(self, backlog: int) -> bool:
        """True when the bulk (spans, flight-recorder entries) should not wait for its next
        shipment: at least ``backlog`` of either waits."""
        return (len(self._site_spans) + len(self._spans) >= backlog
                or self._message_count >= backlog)

    def live(self) -> bool:
        """True when a record people watch live waits: a log line, a failure or a transfer
        (`drain(live_only=True)` ships them alone)."""
        queues = self._queues
        return bool(self._logs or queues["failure"] or queues["transfer"])

    def urgent(self) -> bool:
        """True when a failure waits: it ships at the next look, whatever the live pace."""
        return bool(self._queues["failure"])

    def drain(self, max_items: int = 4096, live_only: bool = False) -> list[Any] | None:
        """Takes up to ``max_items`` records of each kind and returns them as a batch wire list.

        Site spans (at most ``max_items`` more) and their sites ride along, with their
        per-site tallies (and those of spans a full buffer dropped), and so do metric points
        (changed series, the drop counters; the controller adds the invocation metrics up
        from the tallies).
        With ``live_only``, only log lines, failures and transfers: a proc that prints a
        line per call ships its lines at once, and its bulk (spans, metrics, statuses,
        flight records: a snapshot of every changed series each time) at its own pace.
        Returns None when there is nothing to ship. See `monarch.telemetry._batch` for the
        format.
        """
        resource = self.resource
        with self._drain_lock:
            if self.crash is not None and self._crash_clear:
                self.crash.turn()  # what the other file held was shipped by the last drain
            taken = _take(self._logs, max_items)
            log_columns, log_tags, numbers = (wire_columns(taken, resource, self._tag_numbers)
                                              if taken else ([], [], []))
            shipped = sum(map(len, map(_TEXT, taken)))
            self._log_bytes = _recount(self._logs, self._log_bytes - shipped)
            transfers = [r.to_wire() for r in _take(self._queues["transfer"], max_items)]
            failures = [r.to_wire() for r in _take(self._queues["failure"], max_items)]
            spans, sites, site_spans, tallies, metrics, statuses, messages = (
                ([], [], [], [], [], [], []) if live_only else self._take_bulk(max_items))
            self._crash_clear = not (self._logs or self._spans)
        messages = [[*g[:4], pack_columns(g[4])] for g in messages]
        if not (spans or site_spans or tallies or taken or transfers or failures or metrics
                or statuses or messages):
            return None
        return [BATCH_VERSION, dict(resource), spans, [], metrics, transfers, failures, sites,
                site_spans, statuses, messages, log_tags, tallies, log_columns, numbers]

    def _take_bulk(self, max_items: int) -> tuple[list[Any], ...]:
        """(spans, sites, site spans, their tallies, metric points, statuses, message
        groups) taken for a drain, under `_drain_lock`."""
        source = self.source
        spans = [[*f, source] for f in _take(self._spans, max_items)]
        sites, site_spans, tallies = drain_site_spans(self._site_spans, max_items, self._tallies)
        metrics = [p.to_wire() for p in self._collect_metrics(source)]
        statuses, self._statuses = list(self._statuses.values()), {}
        messages = _take(self._messages, max_items)
        self._message_count -= sum(len(g[4]) for g in messages)
        return spans, sites, site_spans, tallies, metrics, statuses, messages

    def drain_bytes(self, max_items: int = 4096, live_only: bool = False) -> bytes | None:
        """Like `drain`, encoded with msgpack."""
        wire = self.drain(max_items, live_only)
        return None if wire is None else encode_batch(wire)

    def after_fork(self) -> None:
        """Empties buffers and metrics in a forked child, which starts its own record."""
        self._drop_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        for queue in self._queues.values():
            queue.clear()
        self._site_spans.clear()
        self._tallies = Tallies()
        self._tag_numbers = TagNumbers()
        self._statuses.clear()
        self._messages.clear()
        self._message_count = 0
        self._log_bytes = 0
        self.crash = None  # the parent's files: the child keeps its own, if asked
        self._crash_clear = True
        self._dropped = dict.fromkeys(KINDS, 0)
        self.metrics.reset()
        self.resource = {**self.resource, "pid": os.getpid()}

    def _add(self, kind: str, record: Any) -> None:
        queue = self._queues[kind]
        if len(queue) < self._caps[kind]:
            queue.append(record)
            if self.on_live is not None and kind != "span":
                self._live()
        else:
            self.count_dropped(kind)

    def _live(self) -> None:
        live, self.on_live = self.on_live, None
        if live is not None:
            live()

    def count_dropped(self, kind: str) -> None:
        """Counts one record of ``kind`` lost (a full buffer, or a failure while recording)."""
        with self._drop_lock:
            self._dropped[kind] = self._dropped.get(kind, 0) + 1
        self.metrics.inc(("telemetry_dropped", kind))

    def _collect_metrics(self, source: str) -> list[MetricPoint]:
        points = self.metrics.collect(source)
        collectors = [*self._collectors, *(_process_collectors if self is _process else ())]
        for collect in collectors:
            try:
                points.extend(collect())
            except Exception:  # a broken user metric must not stop shipping
                self.count_dropped("metric")
        return points


def _recount(lines: deque[Any], estimate: int) -> int:
    """The text bytes of the buffered ``lines`` (unlocked adds may have missed a few in
    `Recorder._log_bytes`), or ``estimate`` when a line landed while counting: an actor thread
    can run mid-count (a garbage collection there runs Python code), and the deque's iterator
    then raises. That raise once lost the lines a drain had taken, printing actors hit it."""
    try:
        return sum(map(len, map(_TEXT, lines)))
    except RuntimeError:  # "deque mutated during iteration": the next drain counts again
        return max(estimate, 0)


def _take(queue: deque[Any], n: int) -> list[Any]:
    out = []
    pop = queue.popleft
    try:
        for _ in range(min(n, len(queue))):
            out.append(pop())
    except IndexError:  # another drainer got there first
        pass
    return out


def recovered_batch(stem: str, resource: dict[str, Any]) -> list[Any] | None:
    """The batch wire list of what a dead proc's crash files hold (see `_crashlog`), its
    resource flagged ``recovered`` (the store keeps only what it lacks); None when empty.

    Args:
        stem: the files' path without suffix.
        resource: the dead proc's resource tags (host, proc, pid, job).
    """
    logs, spans = recover(stem)
    if not logs and not spans:
        return None
    source = str(resource.get("proc") or f"pid-{resource.get('pid')}")
    return [BATCH_VERSION, {**resource, "recovered": True},
            [[*fields[:8], source] for fields in spans],
            [_log_wire(tuple(fields[:7]), resource) for fields in logs], [], [], []]


def _log_wire(fields: tuple[Any, ...], resource: dict[str, Any]) -> list[Any]:
    hlc, wall, stream, level, text, tags, ctx = fields
    trace_id, span_id = ctx if ctx is not None else (None, None)
    return [hlc, wall, stream, level, text, {**resource, **tags}, trace_id, span_id]


_process = Recorder()
_process_collectors: list[Callable[[], list[MetricPoint]]] = []


def add_process_collector(collect: Callable[[], list[MetricPoint]]) -> None:
    """Registers metric points drained with whichever recorder is the process recorder."""
    _process_collectors.append(collect)


def process_recorder() -> Recorder:
    """Returns this process's recorder."""
    return _process


def set_process_recorder(recorder: Recorder) -> Recorder:
    """Replaces this process's recorder (tests, or custom limits); returns the previous one."""
    global _process
    previous, _process = _process, recorder
    return previous


def configure(resource: dict[str, Any]) -> None:
    """Sets this process's resource tags: host, proc, pid, job, ... (see `Recorder.configure`)."""
    _process.configure(resource)


def _after_fork_in_child() -> None:
    from ._hlc import process_clock

    process_clock().reset_lock()
    _process.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
