"""Telemetry records: plain frozen data, each with a msgpack-friendly wire form.

``to_wire()`` returns a list of the fields in declaration order (tuples become lists, bytes stay
bytes); ``from_wire(list)`` rebuilds the record. Extra trailing items are ignored, so a newer
sender may append fields without breaking an older receiver.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

Attributes = dict[str, Any]


def _wire_of(record: Any, n: int) -> list[Any]:
    return [getattr(record, name) for name in record.__slots__[:n]]


@dataclasses.dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span: an endpoint invocation, a controller-side call or a user span.

    Attributes:
        trace_id: 16 bytes shared by every span of one trace.
        span_id: 8 bytes, unique in the trace.
        parent_span_id: the parent's span id, or None for a root span.
        name: what ran, e.g. ``Trainer.step``.
        start_ns: wall-clock start, ns since the epoch.
        end_ns: wall-clock end, ns since the epoch.
        attributes: mesh, actor class, rank, method, bytes in/out, queue wait, ...
        outcome: ``ok``, ``error`` or another short word saying how it ended.
        source: the process that recorded it (its ``proc`` resource tag).
    """

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Attributes = dataclasses.field(default_factory=dict)
    outcome: str = "ok"
    source: str = ""

    KIND: ClassVar[str] = "span"

    @property
    def duration_ns(self) -> int:
        """End minus start, in ns."""
        return self.end_ns - self.start_ns

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 9)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> SpanRecord:
        """Rebuilds a record from `to_wire` output."""
        t, s, p, name, start, end, attrs, outcome, source = wire[:9]
        return cls(bytes(t), bytes(s), None if p is None else bytes(p), name, start, end,
                   dict(attrs), outcome, source)


@dataclasses.dataclass(frozen=True, slots=True)
class LogRecord:
    """One line of stdout/stderr or one `logging` record.

    Attributes:
        hlc: hybrid-logical-clock stamp taken at the source; the merged order of all logs.
        wall_ns: wall-clock time at the source, ns since the epoch.
        stream: ``stdout``, ``stderr`` or ``log``.
        level: a `logging` level number (INFO for stdout, WARNING for stderr).
        text: the line without its newline (a logging record: its formatted message).
        tags: host, proc, pid, mesh, actor_class, rank, logger — whatever was known.
        trace_id: the trace active when the line was written, if any.
        span_id: the span active when the line was written, if any.
    """

    hlc: int
    wall_ns: int
    stream: str
    level: int
    text: str
    tags: Attributes = dataclasses.field(default_factory=dict)
    trace_id: bytes | None = None
    span_id: bytes | None = None

    KIND: ClassVar[str] = "log"

    @property
    def rank(self) -> Any:
        """The rank tag, or None."""
        return self.tags.get("rank")

    @property
    def mesh(self) -> Any:
        """The mesh tag, or None."""
        return self.tags.get("mesh")

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 8)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> LogRecord:
        """Rebuilds a record from `to_wire` output (a tags dict is kept, maybe shared)."""
        hlc, wall, stream, level, text, tags, t, s = (list(wire[:8]) + [None, None])[:8]
        return cls(hlc, wall, stream, level, text, tags if type(tags) is dict else dict(tags),
                   None if t is None else bytes(t), None if s is None else bytes(s))


@dataclasses.dataclass(frozen=True, slots=True)
class MetricPoint:
    """The current value of one metric series in one process.

    Attributes:
        name: metric name without the ``monarch_`` prefix, e.g. ``messages_handled``.
        kind: ``counter`` (cumulative), ``updown`` (cumulative, may fall), ``gauge`` or
            ``histogram``.
        labels: the series' labels.
        value: counter/gauge value; for a histogram the sum of observations.
        time_ns: when it was collected.
        source: the process that reported it.
        count: histogram only: number of observations.
        bounds: histogram only: upper bounds of the finite buckets.
        buckets: histogram only: per-bucket counts, ``len(bounds) + 1`` of them (not cumulative).
        description: help text.
    """

    name: str
    kind: str
    labels: dict[str, str]
    value: float
    time_ns: int = 0
    source: str = ""
    count: int = 0
    bounds: tuple[float, ...] = ()
    buckets: tuple[int, ...] = ()
    description: str = ""

    KIND: ClassVar[str] = "metric"

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        wire = _wire_of(self, 10)
        wire[7], wire[8] = list(self.bounds), list(self.buckets)
        return wire

    @classmethod
    def from_wire(cls, wire: list[Any]) -> MetricPoint:
        """Rebuilds a record from `to_wire` output."""
        name, kind, labels, value, t, source, count, bounds, buckets, desc = wire[:10]
        return cls(name, kind, dict(labels), value, t, source, count, tuple(bounds),
                   tuple(buckets), desc)


@dataclasses.dataclass(frozen=True, slots=True)
class TransferRecord:
    """One finished bulk transfer on the data plane.

    Attributes:
        nbytes: bytes moved.
        seconds: how long it took.
        src: the process the bytes came from.
        dst: the process the bytes went to.
        kind: how they moved, e.g. ``shm``, ``tcp``, ``cuda-staged``.
        time_ns: wall-clock end of the transfer.
        mesh: the actor mesh that asked for it, if known.
        source: the process that recorded it.
    """

    nbytes: int
    seconds: float
    src: str
    dst: str
    kind: str
    time_ns: int = 0
    mesh: str | None = None
    source: str = ""

    KIND: ClassVar[str] = "transfer"

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 8)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> TransferRecord:
        """Rebuilds a record from `to_wire` output."""
        return cls(*wire[:8])


@dataclasses.dataclass(frozen=True, slots=True)
class FailureRecord:
    """A rank that failed: its actor raised, its process died or was killed.

    Attributes:
        mesh: the actor (or proc) mesh name.
        rank: the failed rank, or None when the whole proc failed.
        actor_class: the actor's class name ("" for a proc failure).
        host: the host it ran on.
        pid: its process id, if known.
        exit_code: the process exit code, if it exited.
        signal: the signal that killed it, if any.
        reason: one line saying what happened.
        traceback: the remote traceback text, if any.
        time_ns: when it was detected (wall clock).
        source: the process that reported it.
    """

    mesh: str
    rank: int | None
    actor_class: str
    host: str
    pid: int | None
    exit_code: int | None
    signal: int | None
    reason: str
    traceback: str = ""
    time_ns: int = 0
    source: str = ""

    KIND: ClassVar[str] = "failure"

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 11)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> FailureRecord:
        """Rebuilds a record from `to_wire` output."""
        return cls(*wire[:11])


@dataclasses.dataclass(frozen=True, slots=True)
class RunningHandler:
    """A handler an actor is running now (one per task for an async actor).

    Attributes:
        method: the endpoint.
        start_ns: when it began (wall clock at the actor).
        sender: the caller (``root``, or the calling actor's ``<mesh>[<rank>]``).
        trace_id: the call's trace (hex), if it had one.
        nbytes: bytes of the message.
    """

    method: str
    start_ns: int
    sender: str
    trace_id: str | None = None
    nbytes: int = 0

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 5)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> RunningHandler:
        """Rebuilds a record from `to_wire` output."""
        method, start, sender, trace, nbytes = wire[:5]
        return cls(str(method), int(start), str(sender), None if trace is None else str(trace),
                   int(nbytes or 0))


@dataclasses.dataclass(frozen=True, slots=True)
class ActorStatus:
    """What one actor does now, as its process last reported (only when it changed).

    Attributes:
        actor: the actor id, ``<mesh id>[<rank>]``.
        mesh: the actor mesh id.
        mesh_name: the mesh's name.
        rank: the actor's rank in its mesh.
        actor_class: its class name.
        state: starting, running, failed or stopped (as the actor's process sees it).
        running: the handlers running now (oldest first).
        queued: messages waiting behind them.
        queued_methods: the methods of the first waiting messages, oldest first.
        time_ns: when this was sampled.
        source: the process that reported it.
        events: (time_ns, event, reason) of each step of its life since its last status
            (created, initializing, running, stopping, stopped, failed), as it happened.
    """

    actor: str
    mesh: str
    mesh_name: str
    rank: int
    actor_class: str
    state: str
    running: tuple[RunningHandler, ...] = ()
    queued: int = 0
    queued_methods: tuple[str, ...] = ()
    time_ns: int = 0
    source: str = ""
    events: tuple[tuple[int, str, str], ...] = ()

    KIND: ClassVar[str] = "actor_status"

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        wire = _wire_of(self, 12)
        wire[6] = [h.to_wire() for h in self.running]
        wire[8] = list(self.queued_methods)
        return wire

    @classmethod
    def from_wire(cls, wire: list[Any]) -> ActorStatus:
        """Rebuilds a record from `to_wire` output."""
        actor, mesh, name, rank, cls_name, state, running, queued, methods, t, source = wire[:11]
        events = tuple((int(e[0]), str(e[1]), str(e[2])) for e in wire[11]) \
            if len(wire) > 11 else ()
        return cls(str(actor), str(mesh), str(name), int(rank), str(cls_name), str(state),
                   tuple(RunningHandler.from_wire(h) for h in running), int(queued),
                   tuple(str(m) for m in methods), int(t), str(source), events)


@dataclasses.dataclass(frozen=True, slots=True)
class MessageRecord:
    """One message an actor handled: an entry of its flight recorder.

    Attributes:
        actor: the actor id, ``<mesh id>[<rank>]``.
        mesh_name: the mesh's name.
        rank: the actor's rank.
        method: the endpoint.
        sender: the caller (``root`` or ``<mesh>[<rank>]``).
        start_ns: when the handler began.
        end_ns: when it ended.
        outcome: ``ok`` or ``error``.
        nbytes: bytes of the message.
        source: the process it ran in.
    """

    actor: str
    mesh_name: str
    rank: int
    method: str
    sender: str
    start_ns: int
    end_ns: int
    outcome: str
    nbytes: int = 0
    source: str = ""

    KIND: ClassVar[str] = "message"

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 10)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> MessageRecord:
        """Rebuilds a record from `to_wire` output."""
        actor, name, rank, method, sender, start, end, outcome, nbytes, source = wire[:10]
        return cls(str(actor), str(name), int(rank), str(method), str(sender), int(start),
                   int(end), str(outcome), int(nbytes or 0), str(source))


@dataclasses.dataclass(frozen=True, slots=True)
class StatusEvent:
    """A change in an actor's life, as the controller saw it.

    Attributes:
        time_ns: when it was seen.
        actor: the actor id, ``<mesh id>[<rank>]`` (a proc's name for a proc-wide failure).
        mesh_name: the mesh's name.
        rank: the actor's rank (None for a whole proc).
        event: a step of its life (``created``, ``initializing``, ``running``, ``stopping``,
            ``failed``, ``stopped``; ``client`` for the root), ``stalled`` (a handler ran past
            the stall threshold) or ``resumed`` (that handler ended).
        detail: the method that stalled or resumed, or the failure's reason.
        source: the process the actor ran in.
    """

    time_ns: int
    actor: str
    mesh_name: str
    rank: int | None
    event: str
    detail: str = ""
    source: str = ""

    KIND: ClassVar[str] = "status_event"

    def to_wire(self) -> list[Any]:
        """Returns the msgpack-friendly list form."""
        return _wire_of(self, 7)

    @classmethod
    def from_wire(cls, wire: list[Any]) -> StatusEvent:
        """Rebuilds a record from `to_wire` output."""
        return cls(*wire[:7])


Record = SpanRecord | LogRecord | MetricPoint | TransferRecord | FailureRecord
RECORD_TYPES: dict[str, Any] = {
    cls.KIND: cls for cls in (SpanRecord, LogRecord, MetricPoint, TransferRecord, FailureRecord)
}
