"""Reading the site spans of a batch: columns checked once, records made only when asked for.

A batch's site spans arrive as columns (see `monarch.telemetry._sites.drain_site_spans`). The
controller checks each column as a whole (types and lengths, in C where it can) and keeps the
columns as they are: ingesting costs no object per span, and the garbage collector has nothing
per span to scan (but an `array` is itself an object it tracks: five a batch here). A
`SpanRecord` is made for a span only when a query returns it. When a column does not check
out, the spans are checked one by one and the readable ones kept; the others are counted as
invalid, never returned.
"""

from __future__ import annotations

from array import array
from typing import Any

from ._records import SpanRecord

StoredSite = tuple[str, dict[str, Any], "str | None", str]
"""A site as the controller keeps it: (name, attributes, value_key, source process)."""

_NO_PARENT = bytes(8)
_EMPTY: list[Any] = []


class SiteSpanColumns:
    """The readable site spans of one batch; span ``p`` is row ``p`` of every column."""

    __slots__ = ("ends", "outcome_indices", "outcomes", "parents", "site_indices", "sites",
                 "spans", "starts", "traces", "values")

    def __init__(self, sites: list[StoredSite | None], columns: list[Any]) -> None:
        self.sites = sites
        (site_indices, self.traces, self.spans, self.parents, starts, ends,
         self.outcomes, outcome_indices, values) = columns
        # Kept as machine integers (one C pass each): a list of ns stamps costs 40 bytes an
        # int, an array 8 (see `monarch.telemetry._budget`).
        self.site_indices = _compact(site_indices, "i")
        self.starts, self.ends = _compact(starts, "q"), _compact(ends, "q")
        self.outcome_indices = _compact(outcome_indices, "i")
        self.values = _compact(values, "q") if set(map(type, values)) == {int} else values

    def __len__(self) -> int:
        return len(self.site_indices)

    def trace_id(self, p: int) -> bytes:
        """The trace id of span ``p``."""
        return self.traces[16 * p:16 * p + 16]  # type: ignore[no-any-return]

    def name_and_mesh(self, p: int) -> tuple[str, Any]:
        """The name of span ``p`` and its ``mesh`` attribute (None if it has none)."""
        name, attributes, key, _ = self.sites[self.site_indices[p]]  # type: ignore[misc]
        return name, self.values[p] if key == "mesh" else attributes.get("mesh")

    def record(self, p: int) -> SpanRecord:
        """The record of span ``p``."""
        name, attributes, key, source = self.sites[self.site_indices[p]]  # type: ignore[misc]
        attributes = dict(attributes)
        if key is not None:
            attributes[key] = self.values[p]
        parent = self.parents[8 * p:8 * p + 8]
        return SpanRecord(self.traces[16 * p:16 * p + 16], self.spans[8 * p:8 * p + 8],
                          None if parent == _NO_PARENT else parent, name, self.starts[p],
                          self.ends[p], attributes, self.outcomes[self.outcome_indices[p]],
                          source)

    def records(self) -> list[SpanRecord]:
        """The records of every span."""
        return [self.record(p) for p in range(len(self))]


def _compact(column: Any, code: str) -> Any:
    """``column`` as an `array.array` of ``code`` when every item fits, else as it is."""
    try:
        return array(code, column)
    except (TypeError, OverflowError):  # None values, text values, ...
        return column


def read_site_spans(wire: list[Any], source: str) -> tuple[SiteSpanColumns | None, int]:
    """Reads the site spans of a batch wire list sent by ``source``.

    Returns:
        (columns, invalid): the readable spans (None if there are none) and how many could not
        be read.
    """
    if len(wire) < 9 or not wire[8]:
        return None, 0
    sites = _read_sites(wire[7], source)
    columns = wire[8]
    if _columns_check_out(sites, columns):
        return SiteSpanColumns(sites, columns), 0
    return _salvage(sites, columns)


def _read_sites(sites: Any, source: str) -> list[StoredSite | None]:
    if not isinstance(sites, (list, tuple)):
        return []
    read: list[StoredSite | None] = []
    for site in sites:
        try:
            name, attributes, key = site[:3]
        except (TypeError, ValueError, KeyError):
            read.append(None)
            continue
        ok = type(name) is str and type(attributes) is dict and (key is None or type(key) is str)
        read.append((name, attributes, key, source) if ok else None)
    return read


def _columns_check_out(sites: list[StoredSite | None], columns: Any) -> bool:
    try:
        indices, traces, spans, parents, starts, ends, outcomes, outcome_indices, values = columns
    except (TypeError, ValueError):
        return False
    n = len(indices) if type(indices) is list else -1
    return (all(type(c) is list and len(c) == n
                for c in (starts, ends, outcome_indices, values))
            and type(outcomes) is list and set(map(type, outcomes)) <= {str}
            and all(type(b) is bytes for b in (traces, spans, parents))
            and (len(traces), len(spans), len(parents)) == (16 * n, 8 * n, 8 * n)
            and _all_ints(starts) and _all_ints(ends)
            and _all_ints(indices) and set(indices) <= _readable(sites)
            and _all_ints(outcome_indices) and set(outcome_indices) <= set(range(len(outcomes))))


def _all_ints(column: list[Any]) -> bool:
    return set(map(type, column)) <= {int}


def _readable(sites: list[StoredSite | None]) -> set[int]:
    return {i for i, site in enumerate(sites) if site is not None}


def _salvage(sites: list[StoredSite | None], columns: Any) -> tuple[SiteSpanColumns | None, int]:
    """Keeps the spans whose every field reads; counts the others."""
    if not isinstance(columns, (list, tuple)) or len(columns) < 9:
        return None, 1
    indices, traces, spans, parents, starts, ends, outcomes, outcome_indices, values = [
        c if isinstance(c, (list, tuple, bytes)) else _EMPTY for c in columns[:9]]
    readable = _readable(sites)
    outcomes = [o if type(o) is str else None for o in outcomes]
    kept: list[list[Any]] = [[] for _ in range(8)]
    for p in range(len(indices)):
        row = _row(p, indices, traces, spans, parents, starts, ends, outcome_indices, values)
        if (row is not None and row[0] in readable and 0 <= row[6] < len(outcomes)
                and outcomes[row[6]] is not None):
            for column, value in zip(kept, row):
                column.append(value)
    site_indices, trace_ids, span_ids, parent_ids, start_ns, end_ns, outcome_ns, vals = kept
    bad = max(len(indices), 1) - len(site_indices)
    if not site_indices:
        return None, bad
    return SiteSpanColumns(sites, [site_indices, b"".join(trace_ids), b"".join(span_ids),
                                   b"".join(parent_ids), start_ns, end_ns, outcomes, outcome_ns,
                                   vals]), bad


def _row(p: int, *columns: Any) -> list[Any] | None:
    """Row ``p`` (site index, trace, span, parent, start, end, outcome index, value), or None
    when a field does not read."""
    indices, traces, spans, parents, starts, ends, outcome_indices, values = columns
    try:
        row = [indices[p], traces[16 * p:16 * p + 16], spans[8 * p:8 * p + 8],
               parents[8 * p:8 * p + 8], starts[p], ends[p], outcome_indices[p], values[p]]
    except (IndexError, TypeError):
        return None
    i, trace, span, parent, start, end, outcome = row[:7]
    if (type(i) is int and type(start) is int and type(end) is int and type(outcome) is int
            and all(type(b) is bytes for b in (trace, span, parent))
            and (len(trace), len(span), len(parent)) == (16, 8, 8)):
        return row
    return None
