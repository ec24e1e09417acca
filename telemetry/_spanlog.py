"""The store's spans: a bounded log of chunks, one chunk per ingested batch.

Ingesting a batch appends its spans as one chunk (no per-span work); evicting drops whole chunks,
or moves the start of the oldest one. A chunk's trace index is built the first time a trace is
looked up, so a store that nobody queries by trace never pays for it. Entries are whatever the
store keeps per span (a `SpanRecord`, or a site span as read by `check_site_spans`); the log
only needs their trace id.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ._records import SpanRecord


def trace_id_of(span: Any) -> bytes:
    """The trace id of a stored span."""
    return span.trace_id if type(span) is SpanRecord else span[1]  # type: ignore[no-any-return]


class _Chunk:
    __slots__ = ("index", "spans", "start")

    def __init__(self, spans: list[Any]) -> None:
        self.spans = spans
        self.start = 0  # spans before it are evicted (and replaced by None)
        self.index: dict[bytes, list[int]] | None = None  # trace id -> positions, built lazily

    def positions(self, trace_id: bytes) -> list[int]:
        if self.index is None:
            index: dict[bytes, list[int]] = {}
            for position, span in enumerate(self.spans):
                if span is not None:
                    index.setdefault(trace_id_of(span), []).append(position)
            self.index = index
        return self.index.get(trace_id, [])


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

    def add(self, spans: list[Any]) -> int:
        """Appends ``spans`` (the log owns the list from now on); returns how many old spans
        were evicted to make room."""
        if not spans:
            return 0
        self._chunks.append(_Chunk(spans))
        self._held += len(spans)
        excess = self._held - self._max
        return self._evict(excess) if excess > 0 else 0

    def trace(self, trace_id: bytes) -> list[Any]:
        """Returns the spans of one trace, in arrival order."""
        found = []
        for chunk in self._chunks:
            spans, start = chunk.spans, chunk.start
            found += [spans[p] for p in chunk.positions(trace_id) if p >= start]
        return found

    def newest(self, keep: Callable[[Any], bool], limit: int) -> list[Any]:
        """Returns up to ``limit`` of the newest spans for which ``keep`` is true, newest first."""
        found: list[Any] = []
        if limit <= 0:
            return found
        for span in self._newest_first():
            if keep(span):
                found.append(span)
                if len(found) >= limit:
                    break
        return found

    def _newest_first(self) -> Iterator[Any]:
        for chunk in reversed(self._chunks):
            spans, start = chunk.spans, chunk.start
            for position in range(len(spans) - 1, start - 1, -1):
                yield spans[position]

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
