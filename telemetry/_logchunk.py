"""A batch's log lines as columns: checked once, `LogRecord`s made only when someone reads them.

A proc ships its lines as columns (batch item 13, see `monarch.telemetry._batch`): the clock
stamps, wall times, streams, levels and texts, each line's index into the batch's tag table,
and each line's trace context (None, or its trace and span ids). The controller checks each
column as a whole, in C where it can, and keeps the columns: ingesting a batch of lines costs
no Python step per line (the log book makes its rows and keys from them in C, the journal
holds the chunk whole, the history makes its Arrow columns from them). At 1,024 actors
printing a line per call, making a record per line, putting it in its place and journaling it
took ~12 µs of the controller a line, ~12 ms of a 50 ms round (dropping the lines at the
controller made the round 10 ms shorter).

Columns that do not check out are read line by line, as rows: the readable lines are kept, the
others counted as invalid.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ._budget import GROUP_BYTES, log_lines_bytes
from ._records import LogRecord

_Shared = Callable[[dict[str, Any], "int | None"], dict[str, Any]]
_CONTEXT_TYPES = {type(None), list, tuple}  # a line's trace context: none, or (trace, span)


class LogChunk:
    """Lines ``0 .. len - 1``, line ``p`` at row ``p`` of every column, in the order they were
    buffered (a proc's lines, nearly in HLC order: the log book sorts what it must)."""

    __slots__ = ("bytes", "contexts", "hlcs", "levels", "line_bytes", "streams", "tags",
                 "texts", "walls")

    def __init__(self, hlcs: Any, walls: Any, streams: list[str], levels: list[int],
                 texts: list[str], tags: list[dict[str, Any]], contexts: list[Any]) -> None:
        self.hlcs, self.walls, self.streams, self.levels = hlcs, walls, streams, levels
        self.texts, self.tags, self.contexts = texts, tags, contexts
        self.line_bytes = log_lines_bytes(texts)
        """The lines' estimated bytes, as the log book counts them (`telemetry._budget`)."""
        self.bytes = GROUP_BYTES + self.line_bytes
        """Estimated bytes of the chunk held whole (a journal's item)."""

    def __len__(self) -> int:
        return len(self.texts)

    def records(self) -> list[LogRecord]:
        """A record per line, in order."""
        return list(map(row_record, self.hlcs, self.walls, self.streams, self.levels,
                        self.texts, self.tags, self.contexts))

    @classmethod
    def of_records(cls, records: list[LogRecord]) -> LogChunk:
        """The chunk of records made elsewhere (the controller's own lines), in their order."""
        return cls([r.hlc for r in records], [r.wall_ns for r in records],
                   [r.stream for r in records], [r.level for r in records],
                   [r.text for r in records], [r.tags for r in records],
                   [None if r.trace_id is None else (r.trace_id, r.span_id) for r in records])


def context_id(context: Any, at: int) -> bytes | None:
    """Item `at` of a line's trace context (0: its trace id, 1: its span id), or None."""
    try:
        value = context[at]
    except (TypeError, IndexError):  # no context, or not one
        return None
    return value if type(value) is bytes else None


def row_record(hlc: int, wall: int, stream: str, level: int, text: str, tags: dict[str, Any],
               context: Any) -> LogRecord:
    """The record of a line given as its fields (a row of a `LogChunk`, as the log book
    keeps it)."""
    if context is None:
        return LogRecord(hlc, wall, stream, level, text, tags)
    return LogRecord(hlc, wall, stream, level, text, tags, context_id(context, 0),
                     context_id(context, 1))


def wire_columns(lines: list[tuple[Any, ...]], resource: dict[str, Any],
                 number: Callable[[Any], int]) -> tuple[list[Any], list[Any], list[int]]:
    """A proc's buffered lines (``(hlc, wall, stream, level, text, tags, context)`` each) as
    the columns of batch item 13, the tag table their indices point into (item 11: each
    distinct tags object once, with the resource added) and each table entry's number
    (item 14, `number` of its tags object: `TagNumbers`). A C pass per column, a Python step
    per distinct tags object (an actor's lines share one while its context stays)."""
    hlcs, walls, streams, levels, texts, tags, contexts = map(list, zip(*lines))
    ids = list(map(id, tags))
    distinct = dict(zip(ids, tags))  # each `tags` is alive in `lines` meanwhile
    at = {key: n for n, key in enumerate(distinct)}
    table = [{**resource, **given} for given in distinct.values()]
    return ([hlcs, walls, streams, levels, texts, list(map(at.__getitem__, ids)), contexts],
            table, list(map(number, distinct.values())))


class TagNumbers:
    """A process's numbers for the tags objects its lines carry: the same object, the same
    number, for the process's life (a number is never given to another object), so the
    controller shares the dict it made of a number's tags without hashing them again
    (interning each batch's tag table by its items was ~4 ms of a 1,024-actor printing round
    in the controller). Bounded: when full, it starts over with new numbers."""

    MAX = 65_536

    def __init__(self) -> None:
        self._given: dict[int, tuple[Any, int]] = {}  # id -> (the object, kept: its id is its
        self._next = 0                                #  own while here; its number)

    def __call__(self, tags: Any) -> int:
        found = self._given.get(id(tags))
        if found is not None and found[0] is tags:
            return found[1]
        if len(self._given) >= self.MAX:
            self._given.clear()
        self._next += 1
        self._given[id(tags)] = (tags, self._next)
        return self._next


def read_columns(wire: list[Any], shared: _Shared) -> tuple[LogChunk | None, int]:
    """The lines of batch item 13 (with the tag table of item 11, each dict passed through
    `shared` with its number of item 14, or None), and how many lines could not be read.

    Returns (None, 0) when the batch has no such lines.
    """
    if len(wire) < 14 or not wire[13]:
        return None, 0
    table = wire[11] if isinstance(wire[11], list) else []
    numbers = wire[14] if len(wire) > 14 and isinstance(wire[14], list) else []
    if len(numbers) != len(table) or not set(map(type, numbers)) <= {int}:
        numbers = [None] * len(table)
    table = [shared(t, n) if type(t) is dict else None for t, n in zip(table, numbers)]
    columns = wire[13]
    if _check_out(columns, table):
        hlcs, walls, streams, levels, texts, indices, contexts = columns
        return LogChunk(hlcs, walls, list(map(sys.intern, streams)), levels, texts,
                        list(map(table.__getitem__, indices)), _tuples(contexts)), 0
    return _salvage(columns, table)


def _tuples(contexts: list[Any]) -> list[Any]:
    """The trace contexts as tuples (msgpack makes lists): a tuple of bytes is what the garbage
    collector stops tracking, a list never; in C when every line has one."""
    if None not in contexts:
        return list(map(tuple, contexts))
    return [None if c is None else tuple(c) for c in contexts]


def _check_out(columns: Any, table: list[Any]) -> bool:
    try:
        hlcs, walls, streams, levels, texts, indices, contexts = columns
    except (TypeError, ValueError):
        return False
    n = len(texts) if type(texts) is list else -1
    return (all(type(c) is list and len(c) == n
                for c in (hlcs, walls, streams, levels, indices, contexts))
            and set(map(type, hlcs)) <= {int} and set(map(type, walls)) <= {int}
            and set(map(type, levels)) <= {int} and set(map(type, streams)) <= {str}
            and set(map(type, texts)) <= {str} and set(map(type, indices)) <= {int}
            and set(indices) <= {i for i, t in enumerate(table) if t is not None}
            and set(map(type, contexts)) <= _CONTEXT_TYPES
            and (not hlcs or (min(hlcs) >= 0 and max(hlcs) < 1 << 63))
            and (not walls or (min(walls) >= -(1 << 63) and max(walls) < 1 << 63)))


def _salvage(columns: Any, table: list[Any]) -> tuple[LogChunk | None, int]:
    """Keeps the lines whose every field reads; counts the others."""
    try:
        rows = list(zip(*columns[:7])) if isinstance(columns, (list, tuple)) else []
    except TypeError:  # a column that is not a sequence
        rows = []
    kept = []
    for hlc, wall, stream, level, text, index, context in rows:
        if (type(hlc) is int and type(wall) is int and type(stream) is str
                and type(level) is int and type(text) is str and type(index) is int
                and 0 <= index < len(table) and table[index] is not None
                and type(context) in _CONTEXT_TYPES and 0 <= hlc < 1 << 63):
            kept.append((hlc, wall, sys.intern(stream), level, text, table[index],
                         None if context is None else tuple(context)))
    longest = max((len(c) for c in columns if hasattr(c, "__len__")), default=1) \
        if isinstance(columns, (list, tuple)) else 1
    bad = max(longest, 1) - len(kept)
    if not kept:
        return None, bad
    return LogChunk(*map(list, zip(*kept))), bad
