"""The controller's embedded telemetry store: bounded, queryable, subscribable.

Everything every process shipped, kept in memory up to fixed limits (oldest evicted first), also
for ranks and processes that have died. Thread-safe: the I/O thread ingests while the admin API
and the console query and subscribe.

Ingesting is on the controller's hot path (every process ships every 100 ms): site spans are
checked column by column and kept as they came (`monarch.telemetry._spanlog`); `SpanRecord`s are
made for the spans a query returns, or for subscribers when there are any.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ._aggregate import TransferSummary, aggregate_metrics, summarize_transfers
from ._batch import Batch, BatchError, decode_columns, source_of, unpack_batch
from ._columns import SiteSpanColumns, read_site_spans
from ._actors import ActorBook, MessageGroup, message_records, read_entries, read_message_groups
from ._journal import Journal
from ._records import (
    ActorStatus,
    FailureRecord,
    LogRecord,
    MessageRecord,
    MetricPoint,
    Record,
    SpanRecord,
    StatusEvent,
    TransferRecord,
)
from ._spanlog import SpanLog, records
from ._subscribe import ALL_KINDS, Subscription

_LogKey = tuple[int, str, int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of a store's counters."""

    held: dict[str, int]
    ingested: dict[str, int]
    evicted: dict[str, int]
    invalid: int
    subscribers: int
    subscriber_drops: int


class Store:
    """Bounded store of spans, logs, metrics, transfers, failures, resources and topology.

    Args:
        max_spans: spans kept (oldest evicted first).
        max_logs: log records kept (lowest HLC evicted first).
        max_transfers: transfer records kept.
        max_failures: failure records kept.
        max_series: metric series (per process) kept.
    """

    def __init__(self, *, max_spans: int = 100_000, max_logs: int = 200_000,
                 max_transfers: int = 50_000, max_failures: int = 10_000,
                 max_series: int = 50_000, max_messages: int = 100_000,
                 max_events: int = 50_000) -> None:
        self._lock = threading.RLock()
        self._max_logs, self._max_series = max_logs, max_series
        self._log_keys: list[_LogKey] = []  # sorted; parallel to _logs
        self._logs: list[LogRecord] = []
        self._spans = SpanLog(max_spans)
        self._metrics: dict[tuple[Any, ...], MetricPoint] = {}
        self._transfers: deque[TransferRecord] = deque(maxlen=max_transfers)
        self._failures: deque[FailureRecord] = deque(maxlen=max_failures)
        self.actors = ActorBook(max_messages, max_events)
        """Actor statuses, flight-recorder entries and status events (under `_lock`)."""
        self._journals: dict[str, Journal] | None = None  # see `follow`
        self._resources: dict[str, dict[str, Any]] = {}
        self._topology: Any = None
        self._subscriptions: list[Subscription] = []
        self._seq = itertools.count()  # ingest order: the last tie-breaker of the log order
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
        self._ingest(resource, records, site_spans, invalid + bad)
        if len(wire) > 9:
            self._ingest_actors(source_of(resource), wire[9], wire[10] if len(wire) > 10 else [])
        return len(records) + (0 if site_spans is None else len(site_spans))

    def _ingest(self, resource: dict[str, Any], records: list[Any],
                site_spans: SiteSpanColumns | None, invalid: int) -> None:
        with self._lock:
            self._invalid += invalid
            self._resources[source_of(resource)] = resource
            self._add_all(records, resource.get("pid"), site_spans)

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
            self._resources[source] = dict(resource)

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
        def keep(r: LogRecord) -> bool:
            tags = r.tags
            return ((mesh is None or tags.get("mesh") == mesh)
                    and (rank is None or tags.get("rank") == rank)
                    and (stream is None or r.stream == stream)
                    and (text is None or text in r.text))

        with self._lock:
            if since_hlc is not None:
                start = bisect.bisect_right(self._log_keys, (since_hlc, "\U0010ffff"))
                return list(itertools.islice(filter(keep, self._logs[start:]), limit))
            found = list(itertools.islice(filter(keep, reversed(self._logs)), limit))
        found.reverse()
        return found

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

    def metrics(self, by_process: bool = False) -> list[MetricPoint]:
        """Returns the current value of every series: aggregated over processes (see
        `aggregate_metrics`), or the latest point of each process if ``by_process``."""
        with self._lock:
            points = list(self._metrics.values())
        return points if by_process else aggregate_metrics(points)

    def transfers(self, window: float = 10.0, now_ns: int | None = None) -> TransferSummary:
        """Returns bytes/s per link, per mesh and per kind over the last ``window`` seconds."""
        with self._lock:
            records = list(self._transfers)
        return summarize_transfers(records, window, time.time_ns() if now_ns is None else now_ns)

    def transfer_records(self, limit: int = 1000) -> list[TransferRecord]:
        """Returns the newest transfer records, oldest first."""
        with self._lock:
            return list(self._transfers)[-limit:]

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
            groups = self.actors.messages.groups(actor)
        kept: list[MessageGroup] = []
        taken = 0
        for group in reversed(groups):
            if taken >= limit:
                break
            kept.append(group)
            taken += len(group[4])
        if taken > limit:
            kept[-1] = (*kept[-1][:4], kept[-1][4][taken - limit:])  # type: ignore[assignment]
        kept.reverse()
        return kept

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
            return list(self._logs)

    def follow(self, maxlen: int = 200_000) -> None:
        """Starts keeping, from now on, what is added in arrival order for `since` (the
        controller's Parquet writer calls it once)."""
        with self._lock:
            if self._journals is None:
                self._journals = {kind: Journal(maxlen) for kind in JOURNALED}
                self.actors.journals = self._journals

    def since(self, kind: str, cursor: int) -> tuple[list[Any], int, int]:
        """What was added of ``kind`` (one of `JOURNALED`) after ``cursor``, the new cursor
        and how many were lost to the bound (see `follow`; span items are chunks)."""
        with self._lock:
            if self._journals is None:
                raise RuntimeError("Store.since needs Store.follow() first")
            return self._journals[kind].since(cursor)

    def resources(self) -> dict[str, dict[str, Any]]:
        """Returns each process's resource tags by process name, dead ones included."""
        with self._lock:
            return {k: dict(v) for k, v in self._resources.items()}

    def topology(self) -> Any:
        """Returns the last topology snapshot given to `set_topology` (None before)."""
        return self._topology

    def statistics(self) -> StoreStatistics:
        """Returns a snapshot of the store's counters."""
        with self._lock:
            held = {"span": len(self._spans), "log": len(self._logs),
                    "metric": len(self._metrics), "transfer": len(self._transfers),
                    "failure": len(self._failures)}
            return StoreStatistics(held, dict(self._ingested), dict(self._evicted),
                                   self._invalid, len(self._subscriptions),
                                   sum(s.dropped for s in self._subscriptions))

    # -- subscribing ---------------------------------------------------------------------------

    def subscribe(self, kinds: Iterable[str] = ALL_KINDS, maxsize: int = 10_000,
                  notify: Callable[[], None] | None = None) -> Subscription:
        """Returns a live feed of records of ``kinds`` ingested from now on.

        Args:
            kinds: any of ``span``, ``log``, ``metric``, ``transfer``, ``failure``.
            maxsize: records queued before the newest are dropped (and counted).
            notify: called (on the ingesting thread) after records were queued; e.g.
                ``lambda: loop.call_soon_threadsafe(event.set)`` for an asyncio consumer.
        """
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
                 site_spans: SiteSpanColumns | None = None) -> None:
        spans: list[SpanRecord] = []
        for record in records:
            kind = record.KIND
            self._ingested[kind] += 1
            if kind == "span":
                spans.append(record)
            else:
                getattr(self, "_add_" + kind)(record, pid)
        self._ingested["span"] += 0 if site_spans is None else len(site_spans)
        self._evicted["span"] += self._spans.add(spans, site_spans)
        if self._journals is not None:
            journals = self._journals
            journals["span"].extend(self._spans.last_added)
            for kind in ("log", "transfer", "failure"):
                kept = [r for r in records if r.KIND == kind]
                if kept:
                    journals[kind].extend(kept)
        if self._subscriptions:
            self._offer(records, site_spans)

    def _offer(self, records: list[Any], site_spans: SiteSpanColumns | None) -> None:
        if site_spans is not None and any("span" in s.kinds for s in self._subscriptions):
            records = records + site_spans.records()
        for subscription in list(self._subscriptions):  # a failing one unsubscribes itself
            wanted = [r for r in records if r.KIND in subscription.kinds]
            if wanted:
                subscription.offer(wanted)

    def _add_log(self, record: LogRecord, pid: Any) -> None:
        tags = record.tags
        key = (record.hlc, str(tags.get("proc", "")), _int(tags.get("pid")), next(self._seq))
        index = bisect.bisect_right(self._log_keys, key)
        self._log_keys.insert(index, key)
        self._logs.insert(index, record)
        excess = len(self._logs) - self._max_logs
        if excess > 0:  # evict in chunks of 1/64 so a full store does not memmove per line
            excess = max(excess, self._max_logs // 64)
            del self._log_keys[:excess], self._logs[:excess]
            self._evicted["log"] += excess

    def _add_metric(self, point: MetricPoint, pid: Any) -> None:
        key = (point.source, pid, point.name, tuple(sorted(point.labels.items())))
        if key not in self._metrics and len(self._metrics) >= self._max_series:
            self._evicted["metric"] += 1
            return
        self._metrics[key] = point

    def _add_transfer(self, record: TransferRecord, pid: Any) -> None:
        if len(self._transfers) == self._transfers.maxlen:
            self._evicted["transfer"] += 1
        self._transfers.append(record)

    def _add_failure(self, record: FailureRecord, pid: Any) -> None:
        if len(self._failures) == self._failures.maxlen:
            self._evicted["failure"] += 1
        self._failures.append(record)


JOURNALED = ("span", "log", "transfer", "failure", "message", "status_event")
"""Kinds `Store.since` follows."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
