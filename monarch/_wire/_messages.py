"""The wire protocol: one slotted dataclass per message kind, and one codec.

A message travels as zmq frames `[envelope, payload?, *buffers]`. The envelope is msgpack of
`[VERSION, KIND, *fields]`; it can be routed and shown without unpickling anything. Frames after
the envelope are counted by the envelope (`nframes`): the pickled payload, then out-of-band
buffers. Nothing here knows about meshes or futures: views, ports and traces are plain tuples.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, ClassVar, TypeVar

import msgpack

VERSION = 1
"""Bumped on any incompatible change; a peer speaking another version is dropped and counted."""


class WireError(Exception):
    """A frame could not be decoded: wrong version, unknown kind, or malformed content.

    Raised by `decode`; the receiver drops the message and counts it. Nothing is unpickled.
    """


class Message:
    """Base of wire messages: each kind is a slotted dataclass registered with `message(kind)`,
    which fills these class attributes. Messages are values: never mutated once made (not
    `frozen=True`, whose `__init__` costs 8x as much, on every message decoded)."""

    __slots__ = ()
    KIND: ClassVar[int]
    _getter: ClassVar[Callable[[Any], tuple]]
    _nfields: ClassVar[int]


_KINDS: dict[int, type[Message]] = {}
_M = TypeVar("_M", bound=type[Message])


def message(kind: int) -> Callable[[_M], _M]:
    """Registers a message dataclass (decorate with it above `@dataclass`) as kind `kind`."""

    def register(cls: _M) -> _M:
        if kind in _KINDS:
            raise ValueError(f"message kind {kind} registered twice")
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        cls.KIND = kind
        getter = operator.attrgetter(*names)
        cls._getter = getter if len(names) > 1 else (  # type: ignore[assignment]
            lambda m: (getter(m),))
        cls._nfields = len(names)
        _KINDS[kind] = cls
        return cls

    return register


def encode(msg: Message) -> bytes:
    """Encodes a registered message's envelope."""
    return msgpack.packb([VERSION, msg.KIND, *type(msg)._getter(msg)], use_bin_type=True)


def decode(frame: bytes | memoryview) -> Any:
    """Decodes an envelope; raises WireError for anything that is not a well-formed message."""
    try:
        items = msgpack.unpackb(frame, use_list=False, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise WireError(f"undecodable envelope: {exc}") from None
    if type(items) is not tuple or len(items) < 2:
        raise WireError("envelope is not a list")
    if items[0] != VERSION:
        raise WireError(f"wire version {items[0]!r}, expected {VERSION}")
    cls = _KINDS.get(items[1]) if type(items[1]) is int else None
    if cls is None:
        raise WireError(f"unknown message kind {items[1]!r}")
    if len(items) - 2 != cls._nfields:  # type: ignore[attr-defined]
        raise WireError(f"{cls.__name__}: {len(items) - 2} fields, expected "
                        f"{cls._nfields}")  # type: ignore[attr-defined]
    return cls(*items[2:])


# Statuses of a Reply.
OK = 0
ERROR = 1  # payload is a pickled exception raised by the endpoint
FAILED = 2  # the destination actor has failed; payload is the msgpack failure report


@message(1)
@dataclasses.dataclass(slots=True)
class Call(Message):
    """Delivers a method call to the actors of a cast range, forwarding down the cast tree.

    `view` (a View's wire form) enumerates the called ranks over the proc mesh `procs`; the hop
    that receives this message serves index `lo` and forwards `(lo, hi)` to its children.
    `seqs` numbers each index's message for its (sender, actor) stream, run-length encoded.
    `mesh` is the actor mesh id, or "" for the proc's system agent. `port` is `(address, port
    id)` to reply to, None for a broadcast. `trace` is `(trace_id, span_id)` or None.
    """

    sender: str
    mesh: str
    method: str
    procs: str
    view: tuple
    lo: int
    hi: int
    seqs: tuple
    port: tuple | None
    trace: tuple | None
    hlc: int
    nframes: int


@message(2)
@dataclasses.dataclass(slots=True)
class Reply(Message):
    """A value (or error) for a port: the answer of rank `index` of a call, or a Port.send."""

    port: int
    index: int
    status: int
    hlc: int
    nframes: int


@message(3)
@dataclasses.dataclass(slots=True)
class ProcStarted(Message):
    """A proc announces itself to its spawner once its inbox is bound."""

    proc: str
    pid: int
    address: str
    hostname: str


@message(4)
@dataclasses.dataclass(slots=True)
class ProcExited(Message):
    """A host agent reports that a proc it spawned has exited (code, or -signal)."""

    proc: str
    pid: int
    status: int
    hostname: str


@message(5)
@dataclasses.dataclass(slots=True)
class Notice(Message):
    """A system notification with a msgpack body (failures, stop requests, topology updates)."""

    topic: str
    body: Any


@message(6)
@dataclasses.dataclass(slots=True)
class Telemetry(Message):
    """A batch of telemetry records drained from a process's recorder (msgpack, never pickled)."""

    source: str
    batch: bytes


@message(7)
@dataclasses.dataclass(slots=True)
class Batch(Message):
    """Several Calls for one destination in one zmq message (a forwarding hop coalesces what
    it forwards to each child within one drain of its inbox). `calls` holds each Call's fields
    (without version and kind); their frames follow the envelope, in order."""

    calls: tuple
    nframes: int


@message(8)
@dataclasses.dataclass(slots=True)
class Replies(Message):
    """Several Replies for one destination in one message (the answers of a proc's actors
    that finished together, `_answers`). `replies` holds each Reply's fields (without version
    and kind); their frames follow the envelope, in order."""

    replies: tuple
    nframes: int



def call_or_batch(calls: list[tuple[Call, list[Any]]]) -> tuple[Any, list[Any]]:
    """The message that carries `calls` ((Call, frames) each, in order) to one destination,
    and its frames: the Call itself for one, else one Batch."""
    return _one_or_many(calls, Batch)


def reply_or_replies(replies: list[tuple[Reply, list[Any]]]) -> tuple[Any, list[Any]]:
    """The message that carries `replies` ((Reply, frames) each, in order) to one
    destination, and its frames: the Reply itself for one, else one Replies."""
    return _one_or_many(replies, Replies)


def _one_or_many(items: list[tuple[Any, list[Any]]], many: type[Any]) -> tuple[Any, list[Any]]:
    """`items` (messages of one kind with their frames) as one message: the message itself
    for one, else a `many` (Batch, Replies) of their fields, their frames after it in order."""
    if len(items) == 1:
        return items[0]
    frames = [frame for _, fs in items for frame in fs]
    fields = type(items[0][0])._getter
    return many(tuple(fields(msg) for msg, _ in items), len(frames)), frames


class Seqs:
    """Run-length encoded sequence numbers: `((first_value, count), ...)` for consecutive
    indices; a run holds `count` equal values."""

    @staticmethod
    def encode(values: list[int]) -> tuple:
        runs: list[tuple[int, int]] = []
        for value in values:
            if runs and runs[-1][0] == value:
                runs[-1] = (value, runs[-1][1] + 1)
            else:
                runs.append((value, 1))
        return tuple(runs)

    @staticmethod
    def at(runs: tuple, offset: int) -> int:
        """The value at position `offset` (0-based within the runs)."""
        for value, count in runs:
            if offset < count:
                return value
            offset -= count
        raise IndexError("sequence offset out of range")

    @staticmethod
    def window(runs: tuple, start: int, stop: int) -> tuple:
        """The runs for positions [start, stop)."""
        if len(runs) == 1 and stop <= runs[0][1]:  # one value for every position (a broadcast)
            return ((runs[0][0], stop - start),)
        out: list[tuple[int, int]] = []
        pos = 0
        for value, count in runs:
            lo, hi = max(start, pos), min(stop, pos + count)
            if lo < hi:
                out.append((value, hi - lo))
            pos += count
            if pos >= stop:
                break
        return tuple(out)


KINDS = _KINDS
"""Registered message classes by kind number."""
