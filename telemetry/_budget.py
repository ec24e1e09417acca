"""The controller's memory budget for telemetry: bytes, not counts.

A count bound does not bound memory: a log line may be ten bytes or a megabyte, a span chunk
one span or four thousand, and a job that runs for days fills any count with the largest. So
every part of the store (`monarch.telemetry._store`) and the journals kept for the history
writer are bounded by bytes, each a share of one total (`MONARCH_TELEMETRY_MB`, default 256).
What a part evicts has already reached the job's Parquet history when there is one (the
journals hold it until written), so SQL and post-mortem still see it.

Sizes are estimates, made in O(1) per item from what it holds (lengths of its columns and
texts), never by walking objects; `tests/telemetry/test_budget.py` measures the real
allocations with tracemalloc and keeps each estimate at or above them.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from ._columns import SiteSpanColumns

DEFAULT_MB = 256.0
"""The default total (`MONARCH_TELEMETRY_MB`): fits a laptop beside the job itself."""

SHARES = {"span": 0.28, "log": 0.22, "message": 0.18, "journal": 0.22, "event": 0.04,
          "transfer": 0.03, "failure": 0.03}
"""Each part's share of the total. The journals get a large one: they hold what the history
writer has not written yet, and what does not fit there is lost to the history."""

SPAN_BYTES = 72
"""A site span kept as columns (`_columns.SiteSpanColumns` once compacted): ids 32 bytes, start
and end 16, indices and value ~24."""
SPAN_RECORD_BYTES = 640
"""A span kept as a `SpanRecord` (user spans, spans of the controller): object, ids, dict."""
ENTRY_BYTES = 64
"""A flight-recorder entry kept as columns (`_actors.Entries`): three shared strings by
reference, three int64."""
GROUP_BYTES = 600
"""A group of entries: its head and its columns' own headers."""
LOG_BYTES = 340
"""A log line without its text, kept by the log book (its fields' tuple, clock stamps, sort
key, list slots) or in a chunk; its tags are shared with the other lines of its actor (`Store`
interns them)."""
EVENT_BYTES = 260
"""A status event (its strings are shared)."""
TRANSFER_BYTES = 400
"""A transfer record."""
FAILURE_BYTES = 1200
"""A failure record without its reason and traceback texts."""


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """Bytes each part of the store may hold.

    Args:
        total: bytes for all of them together.
    """

    total: int

    def of(self, part: str) -> int:
        """The bytes of ``part`` (a key of `SHARES`)."""
        return int(self.total * SHARES[part])

    @classmethod
    def from_mb(cls, mb: float) -> Budget:
        """A budget of ``mb`` megabytes (10**6 bytes) in all.

        Raises:
            ValueError: ``mb`` is not a positive number.
        """
        if not mb > 0:
            raise ValueError(f"a telemetry budget must be a positive number of MB, not {mb!r}")
        return cls(int(mb * 1e6))


DEFAULT = Budget.from_mb(DEFAULT_MB)


def text_bytes(text: Any) -> int:
    """What a string costs (its object; O(1))."""
    return sys.getsizeof(text) if type(text) is str else 64


def log_lines_bytes(texts: Sequence[str]) -> int:
    """Log lines given by their texts, as the log book and the journals count them (in C:
    `sys.getsizeof` of each text)."""
    return LOG_BYTES * len(texts) + sum(map(sys.getsizeof, texts))


def chunk_bytes(chunk: Any) -> int:
    """A span chunk of the store (site-span columns, or span records)."""
    if isinstance(chunk, SiteSpanColumns):
        return GROUP_BYTES + SPAN_BYTES * len(chunk) + 400 * len(chunk.sites)
    return GROUP_BYTES + SPAN_RECORD_BYTES * len(chunk)


def group_bytes(group: Any) -> int:
    """A group of flight-recorder entries: ``(actor, mesh, rank, source, entries)``."""
    return GROUP_BYTES + ENTRY_BYTES * len(group[4])


def lines_bytes(chunk: Any) -> int:
    """A chunk of log lines (`monarch.telemetry._logchunk.LogChunk`: it counts its own)."""
    return chunk.bytes  # type: ignore[no-any-return]


def failure_bytes(record: Any) -> int:
    """A failure record."""
    return FAILURE_BYTES + text_bytes(record.reason) + text_bytes(record.traceback)


def event_bytes(_: Any) -> int:
    """A status event."""
    return EVENT_BYTES


def transfer_bytes(_: Any) -> int:
    """A transfer record."""
    return TRANSFER_BYTES


SIZE_OF = {"span": chunk_bytes, "log": lines_bytes, "message": group_bytes,
           "transfer": transfer_bytes, "failure": failure_bytes, "status_event": event_bytes}
"""The estimate of each journaled kind's items (a span item is a chunk of spans, a log item a
chunk of lines, a message item a group)."""


def records_in(kind: str, item: Any) -> int:
    """How many records a journaled item holds (chunks and groups hold many)."""
    if kind == "span" or kind == "log":
        return len(item)
    if kind == "message":
        return len(item[4])
    return 1
