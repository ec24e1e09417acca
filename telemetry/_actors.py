"""What the store knows of each actor beyond spans and logs: its newest status (handlers
running now, messages waiting), its handled messages (flight-recorder entries) and the
changes in its life (status events, stalls included).

Flight-recorder entries travel and are kept as *groups*, one per actor and shipment:
``[actor, mesh_name, rank, source, entries]`` with each entry ``[method, sender, start_ns,
end_ns, outcome, nbytes, sent_hlc]`` (see `message_group`; ``sent_hlc``, the sender's clock when
it sent the message, 0 or missing when not known). A recorder ships a group of 16 entries
or more as columns (`pack_columns`: the texts as lists, the numbers as little-endian int64
bytes), which the controller takes without a Python object per field (`Entries.read`: 2-2.4x
faster from 16 entries); smaller groups, and rows that a column cannot hold, travel as rows.
Taking a group costs the same whatever its size, so a mesh of many busy actors does not make the
controller pay per message handled; entries become `MessageRecord`s (or table rows) only when
asked for, and a malformed entry is skipped then.

A handler is *stalled* once it has run longer than a threshold (`check_stalls`, called about
once a second by the controller): a ``stalled`` event the first time, a ``resumed`` event when
a later status no longer lists it. Not thread-safe: the store calls it under its lock.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from array import array
from typing import Any

from ._bounded import Bounded
from ._budget import DEFAULT, Budget, event_bytes
from ._messagelog import MessageLog
from ._records import ActorStatus, MessageRecord, StatusEvent


class ActorBook:
    """Statuses by actor, handled messages and status events, bounded."""

    def __init__(self, max_messages: int, max_events: int, budget: Budget = DEFAULT,
                 max_actors: int = 100_000) -> None:
        self.statuses: dict[str, ActorStatus] = {}
        """The newest status of each actor; past ``max_actors``, the longest silent go."""
        self._max_actors = max_actors
        self.messages = MessageLog(max_messages, budget.of("message"))
        self.events: Bounded[StatusEvent] = Bounded(max_events, budget.of("event"), event_bytes)
        self.journals: dict[str, Any] | None = None  # the store's, once it follows
        self._stalled: dict[str, set[tuple[str, int]]] = {}  # actor -> (method, start)
        self._last: dict[str, StatusEvent] = {}  # actor -> its last event (oldest first)

    def ingest(self, statuses: list[ActorStatus], groups: list[MessageGroup]) -> None:
        """Takes a process's newest statuses and handled messages (groups)."""
        for status in statuses:
            self._set_status(status)
        if groups:
            self.messages.extend(groups)
            if self.journals is not None:
                self.journals["message"].extend(groups)

    def event(self, event: StatusEvent) -> None:
        """Records one status event, unless it repeats the actor's last one (the controller
        records a failure it saw, and the proc's next status says `failed` again)."""
        last = self._last.pop(event.actor, None)
        self._last[event.actor] = event
        if len(self._last) > self._max_actors:
            del self._last[next(iter(self._last))]
        if last is not None and last.event == event.event and (
                not event.detail or event.detail == last.detail):
            return
        self.events.append(event)
        if self.journals is not None:
            self.journals["status_event"].append(event)

    def stalled_now(self, threshold_s: float, now_ns: int | None = None
                    ) -> list[tuple[ActorStatus, Any]]:
        """(status, handler) of every handler running longer than ``threshold_s``."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        limit = now_ns - int(threshold_s * 1e9)
        return [(status, handler) for status in self.statuses.values()
                if status.state == "running"
                for handler in status.running if handler.start_ns <= limit]

    def check_stalls(self, threshold_s: float, now_ns: int | None = None) -> int:
        """Adds a ``stalled`` event for each handler newly past ``threshold_s``; returns how
        many handlers are stalled now."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        stalled = self.stalled_now(threshold_s, now_ns)
        for status, handler in stalled:
            seen = self._stalled.setdefault(status.actor, set())
            if (handler.method, handler.start_ns) not in seen:
                seen.add((handler.method, handler.start_ns))
                self.event(StatusEvent(now_ns, status.actor, status.mesh_name, status.rank,
                                       "stalled", handler.method, status.source))
        return len(stalled)

    def _set_status(self, status: ActorStatus) -> None:
        previous = self.statuses.pop(status.actor, None)
        self.statuses[status.actor] = status  # at the end: the dict is oldest-reported first
        if len(self.statuses) > self._max_actors:
            gone = next(iter(self.statuses))
            del self.statuses[gone]
            self._stalled.pop(gone, None)
        if status.events:  # the steps as they happened, not as sampled
            for time_ns, event, reason in status.events:
                self.event(StatusEvent(time_ns, status.actor, status.mesh_name, status.rank,
                                       event, reason, status.source))
            self.statuses[status.actor] = dataclasses.replace(status, events=())
        elif previous is None or previous.state != status.state:
            self.event(StatusEvent(status.time_ns, status.actor, status.mesh_name, status.rank,
                                   status.state, "", status.source))
        stalled = self._stalled.get(status.actor)
        if stalled:
            now = {(h.method, h.start_ns) for h in status.running}
            for method, start in sorted(stalled - now, key=lambda m: m[1]):
                stalled.discard((method, start))
                self.event(StatusEvent(status.time_ns, status.actor, status.mesh_name,
                                       status.rank, "resumed", method, status.source))


def read_entries(cls: Any, entries: Any, source: str) -> tuple[list[Any], int]:
    """(records read, how many entries were not) of a batch's statuses or messages."""
    if not isinstance(entries, (list, tuple)):
        return [], 1
    good, bad = [], 0
    for entry in entries:
        try:
            record = cls.from_wire(entry)
        except Exception:  # a malformed entry must not poison the rest
            bad += 1
            continue
        good.append(record if record.source else dataclasses.replace(record, source=source))
    return good, bad


MessageGroup = tuple[str, str, int, str, "Entries"]
"""(actor, mesh_name, rank, source, entries): handled messages of one actor, as kept."""


def message_group(actor: str, mesh_name: str, rank: int, entries: list[Any],
                  source: str = "") -> list[Any]:
    """The wire form of one actor's handled messages: each entry is ``(method, sender,
    start_ns, end_ns, outcome, nbytes)``; ``source`` empty: the shipping process."""
    return [actor, mesh_name, rank, source, entries]


class Entries:
    """A group's flight-recorder entries as columns: method, sender and outcome as shared
    (interned) strings, start_ns, end_ns and nbytes as int64 arrays. An entry costs ~50 bytes
    kept this way; as the lists msgpack decodes, with a string object per field, ~360.
    ``sents`` holds each message's HLC stamp at its sender (0: not known)."""

    __slots__ = ("_ends", "_nbytes", "_sents", "_starts", "methods", "outcomes", "senders")

    def __init__(self, methods: tuple[str, ...], senders: tuple[str, ...], starts: Any,
                 ends: Any, outcomes: tuple[str, ...], nbytes: Any,
                 sents: Any = None) -> None:
        self.methods, self.senders, self.outcomes = methods, senders, outcomes
        # The numbers are kept as bytes, read through int64 views: an `array` is tracked by
        # the garbage collector (four a group, over a hundred thousand at 1,024 busy actors,
        # each scanned at every full collection), bytes are not.
        self._starts, self._ends, self._nbytes = _raw(starts), _raw(ends), _raw(nbytes)
        self._sents = _raw(sents) if sents is not None else bytes(len(self._starts))

    @property
    def starts(self) -> memoryview:
        """Each entry's start (ns), as int64."""
        return memoryview(self._starts).cast("q")

    @property
    def ends(self) -> memoryview:
        """Each entry's end (ns), as int64."""
        return memoryview(self._ends).cast("q")

    @property
    def nbytes(self) -> memoryview:
        """Each entry's message bytes, as int64."""
        return memoryview(self._nbytes).cast("q")

    @property
    def sents(self) -> memoryview:
        """Each entry's HLC stamp at its sender (0: not known), as int64."""
        return memoryview(self._sents).cast("q")

    @classmethod
    def read(cls, entries: Any) -> tuple[Entries, int]:
        """(the well-formed entries of a shipped list, how many were not): method and outcome
        text, start and end int, nbytes an int (else 0), sender any (kept as text). Columns
        (`pack_columns`) are read whole or not at all."""
        if isinstance(entries, dict):
            return cls._read_columns(entries)
        good: Any = entries
        try:
            methods, senders, starts, ends, outcomes, nbytes, sents = _columns(entries)
            if not (_only(str, methods) and _only(str, outcomes) and _only(int, starts)
                    and _only(int, ends) and _only(int, nbytes) and _only(int, sents)):
                raise TypeError
        except (TypeError, ValueError):  # not all well formed: row by row
            good = [row for row in map(_row, entries) if row is not None]
            methods, senders, starts, ends, outcomes, nbytes, sents = _columns(good)
        try:
            return cls(tuple(map(sys.intern, methods)),
                       tuple(map(sys.intern, map(str, senders))), array("q", starts),
                       array("q", ends), tuple(map(sys.intern, outcomes)),
                       array("q", nbytes), array("q", sents)), len(entries) - len(good)
        except OverflowError:  # a number past int64: keep the entries that fit
            fits = [row for row in zip(methods, senders, starts, ends, outcomes, nbytes, sents)
                    if all(-2**63 <= v < 2**63 for v in (*row[2:4], row[5], row[6]))]
            kept, _ = cls.read(fits)
            return kept, len(entries) - len(kept)

    @classmethod
    def _read_columns(cls, columns: dict[Any, Any]) -> tuple[Entries, int]:
        try:
            methods, senders, outcomes = columns["m"], columns["s"], columns["o"]
            n = len(methods)
            numbers = []
            for key in ("t0", "t1", "n", "h"):
                column = array("q")
                column.frombytes(columns[key])
                if len(column) != n:
                    raise ValueError(key)
                if _BIG_ENDIAN:
                    column.byteswap()
                numbers.append(column)
            if not (len(senders) == len(outcomes) == n and _only(str, methods)
                    and _only(str, outcomes)):
                raise ValueError("columns")
        except (KeyError, TypeError, ValueError):
            return (cls((), (), array("q"), array("q"), (), array("q")),
                    max(_column_length(columns), 1))
        starts, ends, nbytes, sents = numbers
        return cls(tuple(map(sys.intern, methods)), tuple(map(sys.intern, map(str, senders))),
                   starts, ends, tuple(map(sys.intern, outcomes)), nbytes, sents), 0

    def __len__(self) -> int:
        return len(self._starts) // 8

    def __getitem__(self, cut: slice) -> Entries:
        return Entries(self.methods[cut], self.senders[cut], self.starts[cut], self.ends[cut],
                       self.outcomes[cut], self.nbytes[cut], self.sents[cut])

    def __iter__(self) -> Any:
        """Each entry as ``(method, sender, start_ns, end_ns, outcome, nbytes)``."""
        return zip(self.methods, self.senders, self.starts, self.ends, self.outcomes,
                   self.nbytes)


_BIG_ENDIAN = sys.byteorder == "big"


def _raw(column: Any) -> bytes:
    """An int64 column (an array, an int64 view, or its bytes) as the bytes it keeps."""
    return column if type(column) is bytes else column.tobytes()

COLUMNS_FROM = 16
"""Groups of this many entries or more travel as columns. Measured (2026-11-28, entries with
real timestamps): columns read 2-2.4x faster from 16 entries (30.6 -> 14.4 us at 16, 929 ->
397 us at 500) but cost the packing proc more below that, and a group of one or two entries
(an actor among a thousand, one call a look) reads no faster: rows stay rows there."""


def pack_columns(entries: Any) -> Any:
    """A group's entries (rows) as the columns they travel in: ``{"m": methods, "s":
    senders, "o": outcomes}`` as lists of text and ``t0``/``t1``/``n``/``h`` (start, end,
    bytes, sent HLC) as little-endian int64 bytes. Rows that do not fit (a field of another
    type, a number past int64) are returned as they are: the reader checks them one by one; so
    are groups of fewer than `COLUMNS_FROM` entries."""
    if len(entries) < COLUMNS_FROM:
        return entries
    try:
        columns = _columns(entries)
        methods, senders, starts, ends, outcomes, nbytes, sents = columns
        packed = []
        for column in (starts, ends, nbytes, sents):
            if not _only(int, column):  # a bool, None or text: the reader's rules per row
                return entries
            numbers = array("q", column)
            if _BIG_ENDIAN:
                numbers.byteswap()
            packed.append(numbers.tobytes())
    except (TypeError, ValueError, OverflowError):
        return entries
    return {"m": list(methods), "s": [str(x) for x in senders], "o": list(outcomes),
            "t0": packed[0], "t1": packed[1], "n": packed[2], "h": packed[3]}


def _column_length(columns: Any) -> int:
    try:
        return len(columns["m"])
    except (KeyError, TypeError):
        return 0


def _columns(entries: Any) -> list[Any]:
    """The seven columns of ``entries`` (seven empty ones for none); a missing seventh
    (``sent_hlc``, which older senders did not ship) reads as zeros.

    Raises:
        TypeError, ValueError: an entry is not a sequence of at least six.
    """
    if not entries:
        return [(), (), (), (), (), (), ()]
    shortest = min(map(len, entries))
    if shortest < 6:
        raise ValueError("an entry of fewer than six fields")
    if shortest >= 7:
        return list(zip(*entries))[:7]
    return [*list(zip(*entries))[:6], tuple(e[6] if len(e) > 6 else 0 for e in entries)]


def _only(kind: type, column: Any) -> bool:
    return set(map(type, column)) <= {kind}


def _row(entry: Any) -> tuple[Any, ...] | None:
    """One shipped entry as a row, or None when it does not read."""
    try:
        method, sender, start, end, outcome, nbytes = entry[:6]
        sent = entry[6] if len(entry) > 6 else 0
    except (TypeError, ValueError):
        return None
    if not (type(method) is str and type(outcome) is str and type(start) is int
            and type(end) is int):
        return None
    return (method, sender, start, end, outcome, nbytes if type(nbytes) is int else 0,
            sent if type(sent) is int else 0)


def read_message_groups(groups: Any, source: str) -> tuple[list[MessageGroup], int]:
    """(groups read, how many groups and entries were not) of a batch's flight-recorder item;
    each group's entries become `Entries`."""
    if not isinstance(groups, (list, tuple)):
        return [], 1
    good, bad = [], 0
    for group in groups:
        if (isinstance(group, (list, tuple)) and len(group) >= 5 and type(group[0]) is str
                and type(group[1]) is str and type(group[2]) is int
                and type(group[3]) is str and isinstance(group[4], (list, tuple, dict))):
            entries, skipped = Entries.read(group[4])
            good.append((group[0], group[1], group[2], group[3] or source, entries))
            bad += skipped
        else:
            bad += 1
    return good, bad


def message_rows(groups: Any) -> list[tuple[Any, ...]]:
    """(actor, mesh_name, rank, method, sender, start_ns, end_ns, outcome, nbytes, source) of
    every entry of `groups` (as kept), in order."""
    return [(actor, name, rank, *entry, source)
            for actor, name, rank, source, entries in groups for entry in entries]


def message_records(groups: Any) -> list[MessageRecord]:
    """The `MessageRecord`s of every entry of `groups`, in order."""
    return [MessageRecord(*row) for row in message_rows(groups)]
