"""The telemetry as Arrow tables: what SQL queries (`monarch.telemetry._sql`) and the job's
Parquet history read. One schema per table, documented in ``docs/QUERY.md``; the same
columns live (from the store) and post-mortem (from Parquet).

Tables: ``spans``, ``logs``, ``metrics``, ``transfers``, ``failures`` (the store's records),
``messages`` (handled messages: the actors' flight recorders), ``actor_status_events``
(started, failed, stopped, stalled, resumed) and ``actors`` (one row per actor, given by the
controller, which knows the topology). pyarrow is imported on first use.

Site spans are converted column by column (ids as hex text, the site's attributes taken per
site, not per span), so a table of 100,000 spans costs well under a second.
"""

from __future__ import annotations

import binascii
import itertools
import json
import operator
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._columns import SiteSpanColumns
from ._records import (
    FailureRecord, LogRecord, MetricPoint, SpanRecord, StatusEvent, TransferRecord,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from ._store import Store

I64, F64, STR, BOOL = "int64", "float64", "string", "bool"

COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "actors": (
        ("actor", STR), ("mesh", STR), ("mesh_id", STR), ("rank", I64), ("point", STR),
        ("actor_class", STR), ("proc", STR), ("host", STR), ("pid", I64), ("state", STR),
        ("messages", I64), ("queue_depth", I64), ("latency_p50_ms", F64),
        ("last_method", STR), ("running_method", STR), ("running_since_ns", I64),
        ("running_s", F64), ("caller", STR), ("trace_id", STR), ("running", I64),
        ("queued", I64), ("queued_methods", STR), ("stalled", BOOL), ("failure", STR),
        ("updated_ns", I64)),
    "actor_status_events": (
        ("time_ns", I64), ("actor", STR), ("mesh", STR), ("rank", I64), ("event", STR),
        ("detail", STR), ("proc", STR)),
    "messages": (
        ("actor", STR), ("mesh", STR), ("rank", I64), ("method", STR), ("sender", STR),
        ("start_ns", I64), ("end_ns", I64), ("duration_ms", F64), ("outcome", STR),
        ("bytes", I64), ("proc", STR)),
    "spans": (
        ("trace_id", STR), ("span_id", STR), ("parent_span_id", STR), ("name", STR),
        ("start_ns", I64), ("end_ns", I64), ("duration_ms", F64), ("outcome", STR),
        ("proc", STR), ("mesh", STR), ("rank", I64), ("method", STR), ("actor_class", STR),
        ("bytes_in", I64), ("attributes", STR)),
    "logs": (
        ("hlc", I64), ("time_ns", I64), ("stream", STR), ("level", I64), ("text", STR),
        ("mesh", STR), ("rank", I64), ("actor_class", STR), ("proc", STR), ("host", STR),
        ("pid", I64), ("trace_id", STR), ("span_id", STR), ("tags", STR)),
    "metrics": (
        ("name", STR), ("type", STR), ("labels", STR), ("mesh", STR), ("method", STR),
        ("value", F64), ("count", I64), ("time_ns", I64), ("proc", STR)),
    "transfers": (
        ("time_ns", I64), ("bytes", I64), ("seconds", F64), ("src", STR), ("dst", STR),
        ("kind", STR), ("mesh", STR), ("proc", STR)),
    "failures": (
        ("time_ns", I64), ("mesh", STR), ("rank", I64), ("actor_class", STR), ("host", STR),
        ("pid", I64), ("exit_code", I64), ("signal", I64), ("cause", STR), ("reason", STR),
        ("traceback", STR), ("proc", STR)),
}
"""Every table's columns and their types, in order."""

TABLES = tuple(COLUMNS)


def repeating(table: str) -> list[str]:
    """The text columns of a table whose values repeat (names, meshes, outcomes...): the
    ones worth a dictionary in Parquet. Ids are unique: a dictionary of them costs twice."""
    return [name for name, kind in COLUMNS.get(table, ()) if kind == STR
            and not name.endswith("_id")]


def schema(table: str) -> pa.Schema:
    """The Arrow schema of a table."""
    import pyarrow as pa

    types = {I64: pa.int64(), F64: pa.float64(), STR: pa.string(), BOOL: pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS[table]])


def from_rows(table: str, rows: Iterable[Sequence[Any]]) -> pa.Table:
    """A table from rows given in column order (None for a missing value)."""
    columns = list(zip(*rows)) or [()] * len(COLUMNS[table])
    return from_columns(table, [list(c) for c in columns])


def from_columns(table: str, columns: Sequence[Sequence[Any]]) -> pa.Table:
    """A table from its columns, in order."""
    import pyarrow as pa

    s = schema(table)
    return pa.Table.from_arrays([_array(c, f.type) for c, f in zip(columns, s)], schema=s)


def _array(column: Sequence[Any], kind: Any) -> Any:
    """An Arrow array of `column`: as it is when every value is of the column's type (Arrow
    checks, in C), else cleaned value by value (`_clean`)."""
    import pyarrow as pa

    try:
        return pa.array(column, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array(_clean(column, kind), type=kind)


def _clean(column: Sequence[Any], kind: Any) -> Sequence[Any]:
    import pyarrow as pa

    if kind == pa.int64():
        return [v if type(v) is int else (int(v) if isinstance(v, (bool, float)) else None)
                for v in column]
    if kind == pa.string():
        return [v if v is None or type(v) is str else str(v) for v in column]
    return column


# -- the store's records ----------------------------------------------------------------------

def spans(chunks: Iterable[tuple[Any, int]]) -> pa.Table:
    """The ``spans`` table of store chunks ((chunk, first position) pairs, see
    `Store.span_chunks`), rows in chunk order. Consecutive site-span chunks (one per batch
    received) are converted together, so a table costs per span, not per batch."""
    import pyarrow as pa

    parts: list[pa.Table] = []
    run: list[tuple[SiteSpanColumns, int]] = []
    for chunk, start in chunks:
        if isinstance(chunk, SiteSpanColumns):
            if start < len(chunk):
                run.append((chunk, start))
            continue
        if run:
            parts.append(_site_spans(run))
            run = []
        parts.append(_span_records(chunk.spans[start:]))
    if run:
        parts.append(_site_spans(run))
    parts = [p for p in parts if p.num_rows]
    return pa.concat_tables(parts) if parts else from_rows("spans", [])


def span_records(records: Sequence[SpanRecord]) -> pa.Table:
    """The ``spans`` table of span records."""
    return _span_records(records)


def _span_records(records: Sequence[SpanRecord]) -> pa.Table:
    rows = []
    for s in records:
        a = s.attributes
        rows.append((s.trace_id.hex(), s.span_id.hex(), _hex(s.parent_span_id), s.name,
                     s.start_ns, s.end_ns, (s.end_ns - s.start_ns) / 1e6, s.outcome, s.source,
                     a.get("mesh"), a.get("rank"), a.get("method"), a.get("actor_class"),
                     a.get("bytes_in"), _json(a)))
    return from_rows("spans", rows)


def _site_spans(run: list[tuple[SiteSpanColumns, int]]) -> pa.Table:
    """The spans of site-span chunks, from each chunk's `start`. Every column is built in C
    (list and bytes joins, Arrow kernels, `binascii`): no Python per span, so a history pass
    holds the GIL that calls need only briefly."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sites: list[Any] = []
    outcomes: list[Any] = []
    site_idx: list[int] = []
    outcome_idx: list[int] = []
    traces, span_ids, parents = [], [], []
    starts: list[Any] = []
    ends: list[Any] = []
    values: list[Any] = []
    for c, start in run:  # a chunk's indices point into its own sites and outcomes
        site_idx.extend(map(operator.add, c.site_indices[start:], itertools.repeat(len(sites))))
        outcome_idx.extend(map(operator.add, c.outcome_indices[start:],
                               itertools.repeat(len(outcomes))))
        sites.extend(s if s is not None else ("", {}, None, "") for s in c.sites)
        outcomes.extend(c.outcomes)
        traces.append(c.traces[16 * start:])
        span_ids.append(c.spans[8 * start:])
        parents.append(c.parents[8 * start:])
        starts.extend(c.starts[start:])
        ends.extend(c.ends[start:])
        values.extend(c.values[start:])
    sites, remap = _distinct_sites(sites)
    idx = pa.array(list(map(remap.__getitem__, site_idx)), type=pa.int32())

    def per_site(fn: Any, kind: Any) -> Any:
        return pa.array([fn(s) for s in sites], type=kind).take(idx)

    begun = pa.array(starts, type=pa.int64())
    ended = pa.array(ends, type=pa.int64())
    if not any(s[2] == "bytes_in" for s in sites):
        bytes_in = pa.nulls(len(idx), type=pa.int64())
    else:  # a span's value is its bytes_in where its site says so; another type reads as null
        if not set(map(type, values)) <= {int, type(None)}:
            values = [v if type(v) is int else None for v in values]
        bytes_in = pc.if_else(per_site(lambda s: s[2] == "bytes_in", pa.bool_()),
                              pa.array(values, type=pa.int64()), pa.scalar(None, pa.int64()))
    parent = _hex_column(b"".join(parents), 8)
    columns = [
        _hex_column(b"".join(traces), 16), _hex_column(b"".join(span_ids), 8),
        pc.if_else(pc.equal(parent, "0" * 16), pa.scalar(None, pa.string()), parent),
        per_site(lambda s: s[0], pa.string()), begun, ended,
        _duration_ms(begun, ended),
        pa.array(outcomes, type=pa.string()).take(pa.array(outcome_idx, type=pa.int32())),
        per_site(lambda s: s[3], pa.string()),
        per_site(lambda s: _str(s[1].get("mesh")), pa.string()),
        per_site(lambda s: _int(s[1].get("rank")), pa.int64()),
        per_site(lambda s: _str(s[1].get("method")), pa.string()),
        per_site(lambda s: _str(s[1].get("actor_class")), pa.string()),
        bytes_in, per_site(lambda s: _json(s[1]), pa.string())]
    return pa.Table.from_arrays(columns, schema=schema("spans"))


def _distinct_sites(sites: list[Any]) -> tuple[list[Any], list[int]]:
    """The distinct sites of a pass's chunks, and each site's index among them: every batch of
    a proc brings its sites again (each chunk its own list), so a pass of 1,024 actors holds
    each site ~4 times, and its columns (the attributes' JSON most: ~5 us a site) are worked
    out once per distinct site. A site whose attributes do not hash stays on its own."""
    distinct: list[Any] = []
    seen: dict[Any, int] = {}
    remap = []
    for site in sites:
        try:
            key = (site[0], tuple(site[1].items()), site[2], site[3])
            at = seen.get(key)
        except TypeError:  # an attribute that does not hash (a list)
            key, at = None, None
        if at is None:
            at = len(distinct)
            distinct.append(site)
            if key is not None:
                seen[key] = at
        remap.append(at)
    return distinct, remap


def _duration_ms(begun: pa.Array, ended: pa.Array) -> pa.Array:
    """(end - start) / 1e6 of int64 ns columns, as float64 ms (what Python's division gives)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.divide(pc.subtract(ended, begun).cast(pa.float64()), 1e6)


def _hex_column(data: bytes, width: int) -> pa.Array:
    """A string array of `data` cut into `width`-byte ids, each as lowercase hex."""
    import pyarrow as pa

    n = len(data) // width
    text = pa.py_buffer(binascii.hexlify(data[:n * width]))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(2 * width), n, [None, text]).cast(
        pa.string())


def logs(records: Iterable[LogRecord]) -> pa.Table:
    """The ``logs`` table. A store shares one tags dict among the lines of an actor's stream
    (`_logbook._Interner`): the columns made of the tags (mesh, rank, ..., the tags as JSON)
    are worked out once per dict, not per line (8 µs a line was most of the history's cost
    when 1,024 actors print a line per call)."""
    records = list(records)
    derived: dict[int, tuple[dict[str, Any], tuple[Any, ...]]] = {}
    per_line = []
    for r in records:
        t = r.tags
        known = derived.get(id(t))
        if known is None or known[0] is not t:
            known = derived[id(t)] = (t, (
                _str(t.get("mesh")), _int(t.get("rank")), _str(t.get("actor_class")),
                _str(t.get("proc")), _str(t.get("host")), _int(t.get("pid")), _json(t)))
        per_line.append(known[1])
    mesh, rank, actor_class, proc, host, pid, tags = (
        list(zip(*per_line)) if per_line else [()] * 7)
    return from_columns("logs", [
        [r.hlc for r in records], [r.wall_ns for r in records],
        [r.stream for r in records], [r.level for r in records], [r.text for r in records],
        mesh, rank, actor_class, proc, host, pid, [_hex(r.trace_id) for r in records],
        [_hex(r.span_id) for r in records], tags])


def metrics(points: Iterable[MetricPoint]) -> pa.Table:
    """The ``metrics`` table (one row per series and process)."""
    return from_rows("metrics", [
        (p.name, p.kind, _json(p.labels), p.labels.get("mesh"), p.labels.get("method"),
         float(p.value), p.count, p.time_ns, p.source) for p in points])


def transfers(records: Iterable[TransferRecord]) -> pa.Table:
    """The ``transfers`` table."""
    return from_rows("transfers", [(t.time_ns, t.nbytes, float(t.seconds), t.src, t.dst, t.kind,
                                    t.mesh, t.source) for t in records])


def failures(records: Iterable[FailureRecord]) -> pa.Table:
    """The ``failures`` table (``cause``: infrastructure when a process ended, else user)."""
    return from_rows("failures", [
        (f.time_ns, f.mesh, f.rank, f.actor_class, f.host, f.pid, f.exit_code, f.signal,
         "infrastructure" if f.exit_code is not None or f.signal is not None else "user",
         f.reason, f.traceback, f.source) for f in records])


def messages(groups: Iterable[Any]) -> pa.Table:
    """The ``messages`` table (flight-recorder entries) of groups as the store keeps them
    (their entries `_actors.Entries`: columns, joined in C)."""
    import pyarrow as pa

    heads: list[tuple[Any, ...]] = []  # (actor, mesh, rank, source) of each group
    which: list[int] = []  # each row's group
    method_c: list[Any] = []
    sender_c: list[Any] = []
    start_c: list[Any] = []
    end_c: list[Any] = []
    outcome_c: list[Any] = []
    bytes_c: list[Any] = []
    for group in groups:
        entries = group[4]
        which.extend(itertools.repeat(len(heads), len(entries)))
        heads.append((group[0], group[1], group[2], group[3]))
        method_c.extend(entries.methods)
        sender_c.extend(entries.senders)
        start_c.extend(entries.starts)
        end_c.extend(entries.ends)
        outcome_c.extend(entries.outcomes)
        bytes_c.extend(entries.nbytes)
    rows_group = pa.array(which, type=pa.int32())

    def per_group(i: int, kind: Any) -> Any:
        return pa.array([head[i] for head in heads], type=kind).take(rows_group)

    begun = pa.array(start_c, type=pa.int64())
    ended = pa.array(end_c, type=pa.int64())
    return pa.Table.from_arrays([
        per_group(0, pa.string()), per_group(1, pa.string()), per_group(2, pa.int64()),
        pa.array(method_c, type=pa.string()), pa.array(sender_c, type=pa.string()), begun,
        ended, _duration_ms(begun, ended),
        pa.array(outcome_c, type=pa.string()), pa.array(bytes_c, type=pa.int64()),
        per_group(3, pa.string())], schema=schema("messages"))


def status_events(records: Iterable[StatusEvent]) -> pa.Table:
    """The ``actor_status_events`` table."""
    return from_rows("actor_status_events", [
        (e.time_ns, e.actor, e.mesh_name, e.rank, e.event, e.detail, e.source)
        for e in records])


def actors(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """The ``actors`` table from dicts keyed by column name (missing keys are null)."""
    names = [name for name, _ in COLUMNS["actors"]]
    return from_rows("actors", [tuple(row.get(n) for n in names) for row in rows])


def store_tables(store: Store, wanted: Iterable[str] = TABLES,
                 actor_rows: Iterable[dict[str, Any]] = ()) -> dict[str, pa.Table]:
    """The tables named in ``wanted`` made from the store now (others empty)."""
    wanted = set(wanted)
    makers = {
        "spans": lambda: spans(store.span_chunks()),
        "logs": lambda: logs(store.all_logs()),
        "metrics": lambda: metrics(store.metrics(by_process=True)),
        "transfers": lambda: transfers(store.transfer_records(limit=10**9)),
        "failures": lambda: failures(store.failures()),
        "messages": lambda: messages(store.message_groups()),
        "actor_status_events": lambda: status_events(store.status_events()),
        "actors": lambda: actors(actor_rows),
    }
    return {name: makers[name]() if name in wanted else from_rows(name, [])
            for name in TABLES}


def _hex(value: bytes | None) -> str | None:
    return value.hex() if value else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, default=str, sort_keys=True)
