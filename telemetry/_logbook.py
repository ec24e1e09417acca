"""The store's log records: kept in HLC order, bounded by count and by bytes.

Records arrive per process in batches, not in HLC order across processes. A batch is appended
as it comes and the book remembers from where its lists may be out of order (a bisect of the
batch's first key in the part known sorted); that tail is sorted (one C sort of a mostly
ordered tail) when something reads the book or evicts, or once it holds `SETTLE_AT` lines
(a book that filled unread sorted all of it at its first eviction: 0.6 s of the controller's
loop at 140,000 lines). Putting each line in its place at
once cost a memmove of every newer line, ~5 us a line at 1,024 actors printing (a proc's lines
arrive up to half a second behind the others'). Keys: (hlc, proc, pid, arrival). The lines of one
actor share one dict of tags and one stream name (msgpack decodes a fresh dict and string for
every line: ~300 bytes a line). A line is kept as a tuple of its fields, made in C from a
batch's columns (`add_chunk`); a `LogRecord` is made only for the lines a read returns. Eviction
takes the lowest HLCs in steps of 1/64 of what is held, so a full book does not memmove its
lists for each new line. Not thread-safe: the store calls it under its lock.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
import sys
from collections.abc import Callable
from typing import Any

from ._budget import log_lines_bytes
from ._logchunk import LogChunk, row_record
from ._records import LogRecord

_LogKey = tuple[int, str, int, int]
_TEXT = operator.itemgetter(4)  # a row's text

SETTLE_AT = 8192
"""Unsorted lines that make an add sort them at once (bounds each sort's cost)."""


class LogBook:
    """Log records in HLC order, at most ``max_logs`` and ``max_bytes`` (estimated)."""

    def __init__(self, max_logs: int, max_bytes: int) -> None:
        self._max, self._max_bytes = max_logs, max_bytes
        self._keys: list[_LogKey] = []  # sorted; parallel to _logs and _tags_of
        self._logs: list[tuple[Any, ...]] = []  # rows: (hlc, wall, stream, level, text,
        # trace context), nothing but atomic values, so the garbage collector stops tracking
        # them at its first look (a row holding its tags dict or a context list stayed
        # tracked: at 1,024 actors printing, 466k tracked objects and 170 ms full collections)
        self._tags_of: list[dict[str, Any]] = []  # each row's tags (shared dicts)
        self.bytes = 0
        """Estimated bytes of the records held."""
        self._tags = _Interner()
        self._seq = itertools.count()  # arrival: the last tie-breaker of the order
        self._sorted = 0
        """The lists are in key order up to here; past it, batches as they came."""

    def __len__(self) -> int:
        return len(self._logs)

    def add(self, record: LogRecord) -> int:
        """Adds a record; returns how many old ones were evicted."""
        return self.add_many([record])

    def add_many(self, records: list[LogRecord]) -> int:
        """Adds a batch of records (the controller's own lines); returns how many old ones
        were evicted."""
        if not records:
            return 0
        shared, first = self._tags.shared, len(self._keys)
        for record in records:
            tags = shared(record.tags)
            self._keys.append((record.hlc, str(tags.get("proc", "")), _int(tags.get("pid")),
                               next(self._seq)))
            stream = record.stream
            self._logs.append((record.hlc, record.wall_ns,
                               sys.intern(stream) if type(stream) is str else stream,
                               record.level, record.text,
                               None if record.trace_id is None
                               else (record.trace_id, record.span_id)))
            self._tags_of.append(tags)
        self.bytes += log_lines_bytes([record.text for record in records])
        return self._added(first)

    def add_chunk(self, chunk: LogChunk, proc: str, pid: int) -> int:
        """Adds the lines of one process's batch, their tags already shared (`shared`);
        returns how many old ones were evicted. No Python step per line: keys and rows are
        made in C from the columns."""
        n = len(chunk)
        if not n:
            return 0
        first = len(self._keys)
        self._keys.extend(zip(chunk.hlcs, itertools.repeat(proc, n), itertools.repeat(pid, n),
                              itertools.islice(self._seq, n)))
        self._logs.extend(zip(chunk.hlcs, chunk.walls, chunk.streams, chunk.levels,
                              chunk.texts, chunk.contexts))
        self._tags_of.extend(chunk.tags)
        self.bytes += chunk.line_bytes
        return self._added(first)

    def add_lines(self, records: list[LogRecord], chunk: LogChunk | None, proc: str,
                  pid: Any) -> tuple[int, list[LogChunk]]:
        """Adds a batch's lines given as records and as a chunk (from process `proc`, `pid`);
        returns how many old ones were evicted, and the lines as chunks (a journal's items)."""
        evicted = self.add_many(records)
        chunks = [LogChunk.of_records(records)] if records else []
        if chunk is not None:
            evicted += self.add_chunk(chunk, proc, _int(pid))
            chunks.append(chunk)
        return evicted, chunks

    def sharer(self, source: str) -> Callable[[dict[str, Any], int | None], dict[str, Any]]:
        """What gives the one dict of some tags the book keeps (see `_Interner`), for tags
        process `source` sent with its number for them (or None)."""
        return functools.partial(self._tags.numbered, source)

    def _added(self, first: int) -> int:
        """Keeps the sort bookkeeping after lines were appended from `first` on; evicts."""
        keys = self._keys
        if self._sorted == first and _ordered(keys, first - 1 if first else 0):
            self._sorted = len(keys)  # in order after what was held: nothing to sort
        else:
            # what is sorted up to the batch's least key stays; `_sorted` <= `first` always
            self._sorted = bisect.bisect_right(keys, min(keys[first:]), 0, self._sorted)
            if len(keys) - self._sorted >= SETTLE_AT:
                self._settle()
        if len(self._logs) > self._max or self.bytes > self._max_bytes:
            return self._evict()
        return 0

    def _settle(self) -> None:
        """Sorts what came out of order (see the module's docstring)."""
        keys, logs, tags, start = self._keys, self._logs, self._tags_of, self._sorted
        if start < len(keys) - 1:  # an order of indices, applied to the three lists in C
            order = sorted(range(start, len(keys)), key=keys.__getitem__)
            take = operator.itemgetter(*order)
            keys[start:], logs[start:], tags[start:] = take(keys), take(logs), take(tags)
        self._sorted = len(keys)

    def _evict(self) -> int:
        self._settle()
        logs = self._logs
        step = max(len(logs) // 64, 1)
        excess = max(len(logs) - self._max, 0)
        cut = 0
        while cut < len(logs) - 1 and (cut < excess or self.bytes > self._max_bytes):
            gone = logs[cut:cut + step]
            self.bytes -= log_lines_bytes(list(map(_TEXT, gone)))
            cut += len(gone)
        del self._keys[:cut], logs[:cut], self._tags_of[:cut]
        self._sorted = len(logs)
        return cut

    def has(self, record: LogRecord) -> bool:
        """Whether a record of the same process, stamp and text is held."""
        self._settle()
        proc = str(record.tags.get("proc", ""))
        i = bisect.bisect_left(self._keys, (record.hlc, proc))
        while i < len(self._keys) and self._keys[i][:2] == (record.hlc, proc):
            if self._logs[i][4] == record.text:
                return True
            i += 1
        return False

    def find(self, mesh: str | None, rank: Any, since_hlc: int | None, text: str | None,
             stream: str | None, limit: int) -> list[LogRecord]:
        """See `Store.logs`."""
        self._settle()
        def keep(line: tuple[tuple[Any, ...], dict[str, Any]]) -> bool:
            row, tags = line
            return ((mesh is None or tags.get("mesh") == mesh)
                    and (rank is None or tags.get("rank") == rank)
                    and (stream is None or row[2] == stream)
                    and (text is None or text in row[4]))

        if since_hlc is not None:
            start = bisect.bisect_right(self._keys, (since_hlc, "\U0010ffff"))
            lines = zip(self._logs[start:], self._tags_of[start:])
            found = list(itertools.islice(filter(keep, lines), limit))
        else:
            lines = zip(reversed(self._logs), reversed(self._tags_of))
            found = list(itertools.islice(filter(keep, lines), limit))
            found.reverse()
        return list(itertools.starmap(_record, found))

    def all(self) -> list[LogRecord]:
        """Every record held, in order."""
        self._settle()
        return list(map(_record, self._logs, self._tags_of))


class _Interner:
    """One shared dict per distinct set of log tags (a job has one per actor and stream),
    instead of one per line. Bounded: cleared when full."""

    MAX = 65_536

    def __init__(self) -> None:
        self._dicts: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._last: tuple[Any, Any] = (None, None)  # (a dict given, its shared one)
        self._numbers: dict[tuple[str, int], dict[str, Any]] = {}  # (source, its number)

    def numbered(self, source: str, tags: dict[str, Any], number: int | None) -> dict[str, Any]:
        """`shared`, for tags process `source` numbered: the dict shared last for that number
        when it is equal (a C comparison), without hashing the tags' items again."""
        if number is None:
            return self.shared(tags)
        key = (source, number)
        found = self._numbers.get(key)
        if found is None or found != tags:
            found = self.shared(tags)
            if len(self._numbers) >= self.MAX:
                self._numbers.clear()
            self._numbers[key] = found
        return found

    def shared(self, tags: dict[str, Any]) -> dict[str, Any]:
        last_given, last_shared = self._last
        if tags is last_given:  # the lines of one batch often share one dict
            return last_shared  # type: ignore[no-any-return]
        found = self._lookup(tags)
        self._last = (tags, found)
        return found

    def _lookup(self, tags: dict[str, Any]) -> dict[str, Any]:
        try:
            key = tuple(tags.items())
            found = self._dicts.get(key)
        except TypeError:  # a value that is not hashable: keep its own dict
            return tags
        if found is None:
            if len(self._dicts) >= self.MAX:
                self._dicts.clear()
                self._numbers.clear()  # what they name may be let go of
            found = self._dicts[key] = tags
        return found


def _record(row: tuple[Any, ...], tags: dict[str, Any]) -> LogRecord:
    hlc, wall, stream, level, text, context = row
    return row_record(hlc, wall, stream, level, text, tags, context)


def _ordered(keys: list[_LogKey], start: int) -> bool:
    """Whether `keys[start:]` is in order: O(what follows `start`), not O(the book), which
    `islice(keys, start, None)` was (it steps over the first `start` keys one by one: at a
    full book of ~140,000 lines, ~60 us a line of every batch)."""
    tail = keys[start:]
    return all(map(operator.le, tail, tail[1:]))


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
