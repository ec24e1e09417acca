"""The store's spans: a bounded log of chunks, one chunk per ingested batch.

Ingesting a batch appends its spans as one chunk (no per-span work); evicting drops whole chunks,
or moves the start of the oldest one. A chunk keeps `SpanRecord`s as they are and site spans as
`check_site_spans` read them (atom-only tuples pointing into the chunk's sites); records are made
only for the spans a query returns. A chunk's trace index is built the first time a trace is
looked up, so a store that nobody queries by trace never pays for it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from ._records import SpanRecord
from ._sites import SiteSpans, StoredSite, site_span_record


class _Chunk:
    __slots__ = ("index", "sites", "spans", "start")

    def __init__(self, sites: list[StoredSite | None], spans: list[Any]) -> None:
        self.sites = sites
        self.spans = spans  # SpanRecord, or a site span tuple: (site index, trace_id, ...)
        self.start = 0  # spans before it are evicted (and replaced by None)
        self.index: dict[bytes, list[int]] | None = None  # trace id -> positions, built lazily

    def record(self, span: Any) -> SpanRecord:
        if type(span) is SpanRecord:
            return span
        return site_span_record(self.sites[span[0]], span)  # type: ignore[arg-type]

    def name_and_mesh(self, span: Any) -> tuple[str, Any]:
        if type(span) is SpanRecord:
            return span.name, span.attributes.get("mesh")
        name, attributes, key, _ = self.sites[span[0]]  # type: ignore[misc]
        return name, span[7] if key == "mesh" else attributes.get("mesh")

    def positions(self, trace_id: bytes) -> list[int]:
        if self.index is None:
            index: dict[bytes, list[int]] = {}
            for position in range(self.start, len(self.spans)):
                span = self.spans[position]
                key = span.trace_id if type(span) is SpanRecord else span[1]
                index.setdefault(key, []).append(position)
            self.index = index
        return self.index.get(trace_id, [])


Found = tuple[_Chunk, Any]
"""A span found by a query: turn it into a `SpanRecord` with `records` (outside the lock)."""


def records(found: list[Found]) -> list[SpanRecord]:
    """Returns the records of spans found by `SpanLog.trace` or `SpanLog.newest`."""
    return [chunk.record(span) for chunk, span in found]


class SpanLog:
    """Spans in arrival order, at most ``max_spans`` (oldest evicted first).

    Not thread-safe: the store calls it under its lock.
    """

    def __init__(self, max_spans: int) -> None:
        self._max = max_spans
        self._chunks: deque[_Chunk] = deque()
        self._held = 0  # spans in the chunks from their start on

    def __len__(self) -> int:
        return self._held

    def add(self, records: list[SpanRecord], site_spans: SiteSpans) -> int:
        """Appends records and site spans (the log owns both lists from now on); returns how
        many old spans were evicted to make room."""
        sites, tuples = site_spans
        spans: list[Any] = records + tuples if records else tuples  # type: ignore[operator]
        if not spans:
            return 0
        self._chunks.append(_Chunk(sites, spans))
        self._held += len(spans)
        excess = self._held - self._max
        return self._evict(excess) if excess > 0 else 0

    def trace(self, trace_id: bytes) -> list[Found]:
        """Returns the spans of one trace, in arrival order (see `records`)."""
        found = []
        for chunk in self._chunks:
            spans, start = chunk.spans, chunk.start
            found += [(chunk, spans[p]) for p in chunk.positions(trace_id) if p >= start]
        return found

    def newest(self, mesh: str | None, name: str | None, limit: int) -> list[Found]:
        """Returns up to ``limit`` of the newest spans (only those with attribute ``mesh`` and
        this ``name``, if given), newest first (see `records`)."""
        found: list[Found] = []
        if limit <= 0:
            return found
        for chunk, span in self._newest_first():
            if mesh is not None or name is not None:
                span_name, span_mesh = chunk.name_and_mesh(span)
                if (mesh is not None and span_mesh != mesh) or (name is not None
                                                                and span_name != name):
                    continue
            found.append((chunk, span))
            if len(found) >= limit:
                break
        return found

    def _newest_first(self) -> Iterator[tuple[_Chunk, Any]]:
        for chunk in reversed(self._chunks):
            spans = chunk.spans
            for position in range(len(spans) - 1, chunk.start - 1, -1):
                yield chunk, spans[position]

    def _evict(self, excess: int) -> int:
        evicted = 0
        chunks = self._chunks
        while excess > 0 and chunks:
            chunk = chunks[0]
            left = len(chunk.spans) - chunk.start
            if left <= excess:
                chunks.popleft()
                taken = left
            else:
                taken = excess
                spans, start = chunk.spans, chunk.start
                spans[start:start + taken] = [None] * taken  # let them go now
                chunk.start = start + taken
            excess -= taken
            evicted += taken
        self._held -= evicted
        return evicted
