"""The controller's embedded telemetry store: bounded, queryable, subscribable.

Everything every process shipped, kept in memory up to fixed limits (oldest evicted first), also
for ranks and processes that have died. Thread-safe: the I/O thread ingests while the admin API
and the console query and subscribe.

Ingesting is on the controller's hot path (each process ships up to twice a second): site spans
are checked column by column and kept as they came (`monarch.telemetry._spanlog`), log lines too
(`_logchunk`, `_logbook`); records are made for what a query returns, or for subscribers.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from ._aggregate import TransferSummary, aggregate_metrics, summarize_transfers
from ._series import Series
from ._batch import Batch, BatchError, decode_columns, source_of, unpack_batch
from ._columns import SiteSpanColumns, read_site_spans
from ._actors import ActorBook, MessageGroup, message_records, read_entries, read_message_groups
from ._bounded import Bounded
from ._journals import Journals
from ._logbook import LogBook
from ._logchunk import LogChunk, read_columns
from ._budget import DEFAULT, Budget, failure_bytes, transfer_bytes
from ._records import (
    ActorStatus, FailureRecord, LogRecord, MessageRecord, MetricPoint, Record, SpanRecord,
    StatusEvent, TransferRecord,
)
from ._meshbook import MeshBook
from ._spanlog import SpanLog, records
from ._subscribe import ALL_KINDS, Subscription

@dataclasses.dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of a store's counters."""

    held: dict[str, int]
    ingested: dict[str, int]
    evicted: dict[str, int]
    invalid: int
    subscribers: int
    subscriber_drops: int
    held_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    """Estimated bytes held per part (`monarch.telemetry._budget`)."""
    budget_bytes: int = 0
    """The bytes all parts may hold together."""


class Store:
    """Bounded store of spans, logs, metrics, transfers, failures, resources and topology.

    Every part is bounded by bytes (a share of ``budget``, see `monarch.telemetry._budget`)
    and by a count; the oldest goes first. The history writer's journals (`follow`) are
    bounded the same way.

    Args:
        budget: the bytes all parts may hold together (default 256 MB).
        max_spans: spans kept.
        max_logs: log records kept (lowest HLC evicted first).
        max_transfers: transfer records kept.
        max_failures: failure records kept.
        max_series: metric series (per process) kept; past it the longest silent one goes.
        max_messages: flight-recorder entries kept.
        max_events: actor status events kept.
    """

    def __init__(self, *, budget: Budget = DEFAULT, max_spans: int = 10_000_000,
                 max_logs: int = 10_000_000, max_transfers: int = 1_000_000,
                 max_failures: int = 100_000, max_series: int = 50_000,
                 max_messages: int = 10_000_000, max_events: int = 1_000_000) -> None:
        self._lock = threading.RLock()
        self.budget = budget
        self._logs = LogBook(max_logs, budget.of("log"))
        self._spans = SpanLog(max_spans, budget.of("span"))
        self._metrics = Series(max_series)
        self._transfers: Bounded[TransferRecord] = Bounded(
            max_transfers, budget.of("transfer"), transfer_bytes)
        self._failures: Bounded[FailureRecord] = Bounded(
            max_failures, budget.of("failure"), failure_bytes)
        self.actors = ActorBook(max_messages, max_events, budget)
        """Actor statuses, flight-recorder entries and status events (under `_lock`)."""
        self._journals: Journals | None = None  # see `follow`
        self._resources: dict[str, dict[str, Any]] = {}  # oldest reported first
        self.meshbook = MeshBook()
        """The meshes the job spawned and the py-spy dumps stored (its own lock)."""
        self._topology: Any = None
        self._subscriptions: list[Subscription] = []
        self._ingested = dict.fromkeys(sorted(ALL_KINDS), 0)
        self._evicted = dict.fromkeys(sorted(ALL_KINDS), 0)
        self._invalid = 0

    # -- writing -------------------------------------------------------------------------------

    def ingest(self, batch: bytes | list[Any] | Batch) -> int | None:
        """Adds a drained batch (bytes, wire list or decoded).

        Returns:
            How many records it added, or None when it was not a batch (counted in
            `statistics`, never raised). Entries that cannot be read are skipped and counted.
            Actor statuses and flight-recorder entries are kept too (not counted here).
            Invocation metrics come from the sites' tallies as shipped, not from a `Batch`.
        """
        if isinstance(batch, Batch):
            records = batch.records()
            self._ingest(batch.resource, records, None, batch.invalid)
            return len(records)
        try:
            wire = unpack_batch(batch)
        except BatchError:
            with self._lock:
                self._invalid += 1
            return None
        resource = dict(wire[1])
        site_spans, invalid = read_site_spans(wire, source_of(resource))
        columns, bad = decode_columns(wire)
        records = [record for column in columns for record in column]
        if resource.pop("recovered", False):  # a dead proc's crash files: what is new
            with self._lock:
                records = self._missing(source_of(resource), records)
        self._ingest(resource, records, site_spans, invalid + bad, wire)
        if len(wire) > 9:
            self._ingest_actors(source_of(resource), wire[9], wire[10] if len(wire) > 10 else [])
        return len(records) + (0 if site_spans is None else len(site_spans))

    def _ingest(self, resource: dict[str, Any], records: list[Any],
                site_spans: SiteSpanColumns | None, invalid: int, wire: Any = ()) -> None:
        source, pid = source_of(resource), resource.get("pid")
        with self._lock:
            lines, bad_lines = (read_columns(wire, self._logs.sharer(source)) if wire
                                else (None, 0))
            self._invalid += invalid + bad_lines
            self._set_resource(source, resource)
            self._add_all(records, pid, site_spans, lines, str(resource.get("proc", "")))
            if len(wire) > 7 and wire[7]:  # the invocation metrics: the sites' tallies
                self._invalid += self._metrics.derive(source, pid, wire)
                if any("metric" in s.kinds for s in self._subscriptions):
                    self._offer(self._metrics.derived_points(source, pid, wire[7]), None)

    def _ingest_actors(self, source: str, statuses: Any, messages: Any) -> None:
        read, bad = read_entries(ActorStatus, statuses, source)
        handled, bad_messages = read_message_groups(messages, source)
        with self._lock:
            self._invalid += bad + bad_messages
            self.actors.ingest(read, handled)

    def add_event(self, event: StatusEvent) -> None:
        """Records a change in an actor's life seen by the controller (a failure, say)."""
        with self._lock:
            self.actors.event(event)

    def check_stalls(self, threshold_s: float, now_ns: int | None = None) -> int:
        """Notes handlers running longer than ``threshold_s`` as stalled (a ``stalled`` event
        the first time); returns how many are stalled now."""
        with self._lock:
            return self.actors.check_stalls(threshold_s, now_ns)

    def add(self, record: Record) -> None:
        """Adds one record made in the controller (a failure it detected, its own logs...)."""
        self.add_many([record])

    def add_many(self, records: Iterable[Record]) -> None:
        """Adds records made in the controller."""
        with self._lock:
            self._add_all(list(records), None)

    def set_resource(self, source: str, resource: dict[str, Any]) -> None:
        """Records the resource tags (host, pid, ...) of a process."""
        with self._lock:
            self._set_resource(source, dict(resource))

    def set_topology(self, topology: Any) -> None:
        """Replaces the topology snapshot (hosts → procs → meshes → actors), owned by the caller."""
        with self._lock:
            self._topology = topology

    # -- reading -------------------------------------------------------------------------------

    def logs(self, mesh: str | None = None, rank: Any = None, since_hlc: int | None = None,
             text: str | None = None, stream: str | None = None,
             limit: int = 1000) -> list[LogRecord]:
        """Returns log records in HLC order (ties: process, pid, arrival).

        Args:
            mesh: only records tagged with this mesh.
            rank: only records tagged with this rank.
            since_hlc: only records stamped after this; then the *first* ``limit`` are returned
                (follow / page forward). Without it, the *last* ``limit`` are.
            text: only records whose text contains this substring.
            stream: only ``stdout``, ``stderr`` or ``log`` records.
            limit: at most this many records.
        """
        with self._lock:
            return self._logs.find(mesh, rank, since_hlc, text, stream, limit)

    def spans(self, trace_id: bytes | None = None, mesh: str | None = None,
              name: str | None = None, limit: int = 1000) -> list[SpanRecord]:
        """Returns spans: all of one trace (by start time), else the newest ``limit`` ones
        (optionally only those with attribute ``mesh``, or this ``name``), oldest first."""
        with self._lock:
            if trace_id is not None:
                found = self._spans.trace(trace_id)
            else:
                found = self._spans.newest(mesh, name, limit)
                found.reverse()
        spans = records(found)  # outside the lock: the found spans no longer change
        if trace_id is not None:
            spans.sort(key=lambda s: s.start_ns)
            del spans[limit:]
        return spans

    def metrics(self, by_process: bool = False,
                names: Collection[str] | None = None) -> list[MetricPoint]:
        """Returns the current value of every series (of the metrics ``names`` only, when
        given): aggregated over processes (see `aggregate_metrics`), or the latest point of
        each process if ``by_process``."""
        with self._lock:
            points = self._metrics.points(names)
        return points if by_process else aggregate_metrics(points)

    def transfers(self, window: float = 10.0, now_ns: int | None = None) -> TransferSummary:
        """Returns bytes/s per link, per mesh and per kind over the last ``window`` seconds."""
        with self._lock:
            records = list(self._transfers)
        return summarize_transfers(records, window, time.time_ns() if now_ns is None else now_ns)

    def transfer_records(self, limit: int = 1000) -> list[TransferRecord]:
        """Returns the newest transfer records, oldest first."""
        with self._lock:
            return self._transfers.newest(limit)

    def failures(self, mesh: str | None = None) -> list[FailureRecord]:
        """Returns failure records (optionally of one mesh), oldest first."""
        with self._lock:
            return [f for f in self._failures if mesh is None or f.mesh == mesh]

    def actor_statuses(self) -> dict[str, ActorStatus]:
        """Returns the newest status of every actor that reported one, by actor id."""
        with self._lock:
            return dict(self.actors.statuses)

    def messages(self, actor: str | None = None, limit: int = 100_000) -> list[MessageRecord]:
        """Returns handled messages (flight-recorder entries), oldest first: the newest
        ``limit`` (of one actor, if given)."""
        return message_records(self.message_groups(actor, limit))

    def message_groups(self, actor: str | None = None, limit: int = 100_000) -> list[MessageGroup]:
        """`messages` as the groups kept (`telemetry._actors`), the oldest cut to ``limit``."""
        with self._lock:
            return self.actors.messages.newest_entries(actor, limit)

    def status_events(self) -> list[StatusEvent]:
        """Returns the actors' status events, oldest first."""
        with self._lock:
            return list(self.actors.events)

    def span_chunks(self) -> list[tuple[Any, int]]:
        """Returns the held spans as (chunk, first held position) pairs, oldest first: see
        `monarch.telemetry._tables` (a chunk is never changed once added)."""
        with self._lock:
            return self._spans.chunks()

    def all_logs(self) -> list[LogRecord]:
        """Returns every held log record in HLC order."""
        with self._lock:
            return self._logs.all()

    def follow(self, hurry: float = 1.0) -> Journals:
        """Starts keeping, from now on, what is added in arrival order for one follower (the
        controller's Parquet writer calls it once); returns the journals it reads (their
        `behind` is set when one is past ``hurry`` of its share)."""
        with self._lock:
            if self._journals is None:
                self._journals = Journals(self._lock, self.budget.of("journal"), hurry=hurry)
                self.actors.journals = self._journals.by_kind
            return self._journals

    def resources(self) -> dict[str, dict[str, Any]]:
        """Returns each process's resource tags by process name, dead ones included."""
        with self._lock:
            return {k: dict(v) for k, v in self._resources.items()}

    def topology(self) -> Any:
        """Returns the last topology snapshot given to `set_topology` (None before)."""
        return self._topology

    def followed(self) -> bool:
        """Whether a subscription is open (someone follows what comes in live)."""
        return bool(self._subscriptions)

    def statistics(self) -> StoreStatistics:
        """Returns a snapshot of the store's counters."""
        with self._lock:
            held = {"span": len(self._spans), "log": len(self._logs),
                    "metric": len(self._metrics), "transfer": self._transfers.records,
                    "failure": self._failures.records, "message": self.actors.messages.records,
                    "status_event": self.actors.events.records}
            held_bytes = {"span": self._spans.bytes, "log": self._logs.bytes,
                          "transfer": self._transfers.bytes, "failure": self._failures.bytes,
                          "message": self.actors.messages.bytes,
                          "status_event": self.actors.events.bytes,
                          "journal": self._journals.bytes if self._journals else 0}
            return StoreStatistics(held, dict(self._ingested),
                                   {**self._evicted, "metric": self._metrics.evicted},
                                   self._invalid, len(self._subscriptions),
                                   sum(s.dropped for s in self._subscriptions), held_bytes,
                                   self.budget.total)

    # -- subscribing ---------------------------------------------------------------------------

    def subscribe(self, kinds: Iterable[str] = ALL_KINDS, maxsize: int = 10_000,
                  notify: Callable[[], None] | None = None) -> Subscription:
        """Returns a live feed of records of ``kinds`` (any of ``span``, ``log``, ``metric``,
        ``transfer``, ``failure``) ingested from now on: ``maxsize`` records queued before the
        newest are dropped (and counted); ``notify`` is called (on the ingesting thread) after
        records were queued (``lambda: loop.call_soon_threadsafe(event.set)``, say)."""
        subscription = Subscription(kinds, maxsize, notify, self._unsubscribe)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

    # -- internals -----------------------------------------------------------------------------

    def _add_all(self, records: list[Any], pid: Any,
                 site_spans: SiteSpanColumns | None = None, lines: LogChunk | None = None,
                 proc: str = "") -> None:
        """Adds records (a batch's rows, or made in the controller), a batch's site spans and
        its lines as columns (`lines`, from process `proc`)."""
        spans: list[SpanRecord] = []
        logs: list[LogRecord] = []
        for record in records:
            kind = record.KIND
            self._ingested[kind] += 1
            if kind == "span":
                spans.append(record)
            elif kind == "log":
                logs.append(record)
            else:
                getattr(self, "_add_" + kind)(record, pid)
        self._ingested["log"] += 0 if lines is None else len(lines)
        evicted, chunks = self._logs.add_lines(logs, lines, proc, pid)
        self._evicted["log"] += evicted
        self._ingested["span"] += 0 if site_spans is None else len(site_spans)
        self._evicted["span"] += self._spans.add(spans, site_spans)
        if self._journals is not None:
            journals = self._journals.by_kind
            journals["span"].extend(self._spans.last_added)
            journals["log"].extend(chunks)  # a chunk an item: no step per line
            for kind in ("transfer", "failure"):
                kept = [r for r in records if r.KIND == kind]
                if kept:
                    journals[kind].extend(kept)
        if self._subscriptions:
            if lines is not None and any("log" in s.kinds for s in self._subscriptions):
                records = records + lines.records()
            self._offer(records, site_spans)

    def _offer(self, records: list[Any], site_spans: SiteSpanColumns | None) -> None:
        if site_spans is not None and any("span" in s.kinds for s in self._subscriptions):
            records = records + site_spans.records()
        for subscription in list(self._subscriptions):  # a failing one unsubscribes itself
            wanted = [r for r in records if r.KIND in subscription.kinds]
            if wanted:
                subscription.offer(wanted)

    def _missing(self, source: str, records: list[Any]) -> list[Any]:
        """The records recovered from a dead proc (`_crashlog`) that the store lacks."""
        spans = [r for r in records if r.KIND == "span"]
        known = self._spans.span_ids_since(
            source, min((s.start_ns for s in spans), default=0) - 10**10) if spans else set()
        return [r for r in records if (r.span_id not in known if r.KIND == "span"
                                       else r.KIND != "log" or not self._logs.has(r))]

    def _add_metric(self, point: MetricPoint, pid: Any) -> None:
        self._metrics.add(point, pid)

    def _add_transfer(self, record: TransferRecord, pid: Any) -> None:
        self._evicted["transfer"] += self._transfers.append(record)

    def _add_failure(self, record: FailureRecord, pid: Any) -> None:
        self._evicted["failure"] += self._failures.append(record)

    def _set_resource(self, source: str, resource: dict[str, Any]) -> None:
        self._resources.pop(source, None)
        self._resources[source] = resource
        if len(self._resources) > MAX_PROCESSES:
            del self._resources[next(iter(self._resources))]  # the longest silent process


MAX_PROCESSES = 100_000
"""Processes whose resource tags are kept (dead ones included); past it the longest silent."""
