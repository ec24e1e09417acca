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

import itertools
import operator
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._arrow import (
    COLUMNS, TABLES, column_array, from_rows, hex_column, hex_or_none, int_or_none, json_text,
    schema, text_or_none,
)
from ._columns import SiteSpanColumns
from ._logchunk import LogChunk, context_id
from ._records import FailureRecord, MetricPoint, SpanRecord, StatusEvent, TransferRecord

if TYPE_CHECKING:
    import pyarrow as pa

    from ._store import Store


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
        rows.append((s.trace_id.hex(), s.span_id.hex(), hex_or_none(s.parent_span_id), s.name,
                     s.start_ns, s.end_ns, (s.end_ns - s.start_ns) / 1e6, s.outcome, s.source,
                     a.get("mesh"), a.get("rank"), a.get("method"), a.get("actor_class"),
                     a.get("bytes_in"), json_text(a)))
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
    parent = hex_column(b"".join(parents), 8)
    columns = [
        hex_column(b"".join(traces), 16), hex_column(b"".join(span_ids), 8),
        pc.if_else(pc.equal(parent, "0" * 16), pa.scalar(None, pa.string()), parent),
        per_site(lambda s: s[0], pa.string()), begun, ended,
        _duration_ms(begun, ended),
        pa.array(outcomes, type=pa.string()).take(pa.array(outcome_idx, type=pa.int32())),
        per_site(lambda s: s[3], pa.string()),
        per_site(lambda s: text_or_none(s[1].get("mesh")), pa.string()),
        per_site(lambda s: int_or_none(s[1].get("rank")), pa.int64()),
        per_site(lambda s: text_or_none(s[1].get("method")), pa.string()),
        per_site(lambda s: text_or_none(s[1].get("actor_class")), pa.string()),
        bytes_in, per_site(lambda s: json_text(s[1]), pa.string())]
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


def logs(chunks: Iterable[LogChunk], known: dict[int, Any] | None = None) -> pa.Table:
    """The ``logs`` table of chunks of lines (`monarch.telemetry._logchunk`: what the store
    journals; `LogChunk.of_records` makes one of records), in C per line: the columns made of
    a line's tags (mesh, rank, ..., the tags as JSON) are worked out once per distinct dict (a
    store shares one per actor, `_logbook._Interner`) and taken per line by index, as the
    spans table does per site; ids are hex in one pass (8 µs a line was most of the history's
    cost when 1,024 actors print a line per call). `known` keeps each dict's JSON for the next
    call (the history writer's: an actor's dict is the same pass after pass)."""
    import pyarrow as pa

    chunks = list(chunks)
    at: dict[int, int] = {}
    dicts: list[dict[str, Any]] = []
    index: list[int] = []
    for chunk in chunks:
        ids = list(map(id, chunk.tags))
        for key, tags in dict(zip(ids, chunk.tags)).items():  # each distinct dict
            if key not in at:
                at[key] = len(dicts)
                dicts.append(tags)
        index += map(at.__getitem__, ids)
    take = pa.array(index, type=pa.int32())

    def per_tags(fn: Any, kind: Any) -> Any:
        return pa.array([fn(t) for t in dicts], type=kind).take(take)

    def joined(column: str) -> list[Any]:
        return list(itertools.chain.from_iterable(getattr(c, column) for c in chunks))

    contexts = joined("contexts")
    return pa.Table.from_arrays([
        column_array(joined("hlcs"), pa.int64()), column_array(joined("walls"), pa.int64()),
        column_array(joined("streams"), pa.string()), column_array(joined("levels"), pa.int64()),
        column_array(joined("texts"), pa.string()),
        per_tags(lambda t: text_or_none(t.get("mesh")), pa.string()),
        per_tags(lambda t: int_or_none(t.get("rank")), pa.int64()),
        per_tags(lambda t: text_or_none(t.get("actor_class")), pa.string()),
        per_tags(lambda t: text_or_none(t.get("proc")), pa.string()),
        per_tags(lambda t: text_or_none(t.get("host")), pa.string()),
        per_tags(lambda t: int_or_none(t.get("pid")), pa.int64()),
        _ids_hex(contexts, 0, 16), _ids_hex(contexts, 1, 8),
        per_tags(lambda t: _json_known(t, known), pa.string())], schema=schema("logs"))


def _ids_hex(contexts: list[Any], at: int, width: int) -> pa.Array:
    """Item `at` (an id of `width` bytes) of each line's trace context as hex, or null: in one
    C pass when every line has one of that width."""
    import pyarrow as pa

    try:
        ids = list(map(operator.itemgetter(at), contexts))
        if set(map(type, ids)) == {bytes} and set(map(len, ids)) == {width}:
            return hex_column(b"".join(ids), width)
    except (TypeError, IndexError):  # a line without a context
        pass
    return pa.array([hex_or_none(context_id(c, at)) for c in contexts], type=pa.string())


def _json_known(tags: dict[str, Any], known: dict[int, Any] | None) -> str:
    if known is None:
        return json_text(tags)
    found = known.get(id(tags))
    if found is None or found[0] is not tags:
        if len(known) >= 65_536:
            known.clear()
        found = known[id(tags)] = (tags, json_text(tags))  # the dict kept: its id stays its own
    return found[1]  # type: ignore[no-any-return]


def metrics(points: Iterable[MetricPoint]) -> pa.Table:
    """The ``metrics`` table (one row per series and process)."""
    return from_rows("metrics", [
        (p.name, p.kind, json_text(p.labels), p.labels.get("mesh"), p.labels.get("method"),
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
        "logs": lambda: logs([LogChunk.of_records(store.all_logs())]),
        "metrics": lambda: metrics(store.metrics(by_process=True)),
        "transfers": lambda: transfers(store.transfer_records(limit=10**9)),
        "failures": lambda: failures(store.failures()),
        "messages": lambda: messages(store.message_groups()),
        "actor_status_events": lambda: status_events(store.status_events()),
        "actors": lambda: actors(actor_rows),
    }
    return {name: makers[name]() if name in wanted else from_rows(name, [])
            for name in TABLES}
