"""The store's spans: a bounded log of chunks, one chunk per ingested batch.

Ingesting a batch appends its spans as a chunk, in no per-span work: the site spans as the
`SiteSpanColumns` they arrived in, other spans as `SpanRecord`s. Evicting drops whole chunks, or
moves the start of the oldest one. Records are made only for the spans a query returns, and a
chunk's trace index is built the first time a trace is looked up in it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from ._budget import DEFAULT, chunk_bytes
from ._columns import SiteSpanColumns
from ._records import SpanRecord


class _Records:
    """A chunk's spans given as records: the same interface as `SiteSpanColumns`."""

    __slots__ = ("spans",)

    def __init__(self, spans: list[SpanRecord]) -> None:
        self.spans = spans

    def __len__(self) -> int:
        return len(self.spans)

    def trace_id(self, p: int) -> bytes:
        return self.spans[p].trace_id

    def name_and_mesh(self, p: int) -> tuple[str, Any]:
        span = self.spans[p]
        return span.name, span.attributes.get("mesh")

    def record(self, p: int) -> SpanRecord:
        return self.spans[p]


class _Chunk:
    __slots__ = ("bytes", "index", "spans", "start")

    def __init__(self, spans: SiteSpanColumns | _Records) -> None:
        self.spans = spans
        self.bytes = chunk_bytes(spans)  # until the whole chunk goes
        self.start = 0  # the spans before it are evicted
        self.index: dict[bytes, list[int]] | None = None  # trace id -> positions, built lazily

    def positions(self, trace_id: bytes) -> list[int]:
        if self.index is None:
            index: dict[bytes, list[int]] = {}
            trace_of = self.spans.trace_id
            for p in range(len(self.spans)):
                index.setdefault(trace_of(p), []).append(p)
            self.index = index
        return [p for p in self.index.get(trace_id, ()) if p >= self.start]


Found = tuple[SiteSpanColumns | _Records, int]
"""A span found by a query: turn it into a `SpanRecord` with `records` (outside the lock)."""


def records(found: list[Found]) -> list[SpanRecord]:
    """Returns the records of spans found by `SpanLog.trace` or `SpanLog.newest`."""
    return [spans.record(p) for spans, p in found]


class SpanLog:
    """Spans in arrival order, at most ``max_spans`` and ``max_bytes`` (estimated, see
    `monarch.telemetry._budget`; oldest evicted first).

    Not thread-safe: the store calls it under its lock.
    """

    def __init__(self, max_spans: int, max_bytes: int = DEFAULT.of("span")) -> None:
        self._max, self._max_bytes = max_spans, max_bytes
        self._chunks: deque[_Chunk] = deque()
        self._held = 0  # spans in the chunks from their start on
        self.bytes = 0
        """Estimated bytes of the chunks held (a chunk counts whole until it goes)."""
        self.last_added: list[Any] = []
        """The chunk objects the last `add` appended."""

    def __len__(self) -> int:
        return self._held

    def add(self, records: list[SpanRecord], columns: SiteSpanColumns | None) -> int:
        """Appends records, then site spans (the log owns them from now on); returns how many
        old spans were evicted to make room."""
        self.last_added = []
        for spans in (_Records(records) if records else None, columns):
            if spans is not None and len(spans):
                chunk = _Chunk(spans)
                self._chunks.append(chunk)
                self._held += len(spans)
                self.bytes += chunk.bytes
                self.last_added.append(spans)
        return self._evict()

    def chunks(self) -> list[tuple[Any, int]]:
        """(spans, first held position) of every chunk, oldest first; a chunk's spans are
        `SiteSpanColumns` or `_Records` (with ``.spans``)."""
        return [(chunk.spans, chunk.start) for chunk in self._chunks]

    def trace(self, trace_id: bytes) -> list[Found]:
        """Returns the spans of one trace, in arrival order (see `records`)."""
        return [(chunk.spans, p) for chunk in self._chunks for p in chunk.positions(trace_id)]

    def newest(self, mesh: str | None, name: str | None, limit: int) -> list[Found]:
        """Returns up to ``limit`` of the newest spans (only those with attribute ``mesh`` and
        this ``name``, if given), newest first (see `records`)."""
        found: list[Found] = []
        if limit <= 0:
            return found
        for spans, p in self._newest_first():
            if mesh is not None or name is not None:
                span_name, span_mesh = spans.name_and_mesh(p)
                if (mesh is not None and span_mesh != mesh) or (name is not None
                                                                and span_name != name):
                    continue
            found.append((spans, p))
            if len(found) >= limit:
                break
        return found

    def span_ids_since(self, source: str, since_ns: int) -> set[bytes]:
        """The ids of the spans given as records (user spans) by ``source``, from the newest
        back to the first chunk that ended before ``since_ns``."""
        found: set[bytes] = set()
        for chunk in reversed(self._chunks):
            spans = chunk.spans
            if not isinstance(spans, _Records):
                continue
            held = spans.spans[chunk.start:]
            found.update(s.span_id for s in held if s.source == source)
            if held and max(s.end_ns for s in held) < since_ns:
                break
        return found

    def _newest_first(self) -> Iterator[Found]:
        for chunk in reversed(self._chunks):
            for p in range(len(chunk.spans) - 1, chunk.start - 1, -1):
                yield chunk.spans, p

    def _evict(self) -> int:
        evicted = 0
        chunks = self._chunks
        while chunks and (self._held > self._max or self.bytes > self._max_bytes):
            chunk = chunks[0]
            left = len(chunk.spans) - chunk.start
            excess = self._held - self._max
            if self.bytes > self._max_bytes or excess >= left:
                chunks.popleft()
                self.bytes -= chunk.bytes
                taken = left
            else:
                chunk.start += excess
                taken = excess
            self._held -= taken
            evicted += taken
        return evicted
