"""Site spans: the runtime's invocation and call spans, their metrics, and their way to the store."""

from __future__ import annotations

import gc
import threading

from monarch.telemetry import (
    MetricPoint,
    Recorder,
    SpanRecord,
    SpanSite,
    Store,
    _sites,
    begin_call,
    begin_invocation,
    call_site,
    current_trace_context,
    decode_batch,
    encode_batch,
    end_call,
    end_invocation,
    invocation_site,
    reset_trace_context,
    set_process_recorder,
    set_trace_context,
    start_site_span,
    start_span,
)
from monarch.telemetry._metrics import LATENCY_BOUNDS, MetricsTable

PARENT = (b"\x01" * 16, b"\x02" * 8)


def metrics_of(wire: list) -> dict[tuple, MetricPoint]:
    """The store's points once it took in the batch: the invocation metrics are derived there,
    never shipped as points."""
    assert not {m[0] for m in wire[4]} & {"messages_handled", "handler_latency_seconds"}
    store = Store()
    store.ingest(encode_batch(wire))
    return {(p.name, tuple(sorted(p.labels.items()))): p
            for p in store.metrics(by_process=True)}


def invoke(rank: int = 0, method: str = "step", nbytes: int = 100, outcome: str = "ok",
           parent: tuple[bytes, bytes] | None = PARENT) -> None:
    site = invocation_site("trainer", "Trainer", rank, method)
    end_invocation(begin_invocation(site, parent, nbytes), outcome)


def test_invocation_span_carries_what_the_mission_asks(recorder: Recorder, drain) -> None:
    invoke(rank=3, nbytes=42, outcome="error")
    (span,) = decode_batch(drain(recorder)).spans
    assert (span.trace_id, span.parent_span_id) == PARENT
    assert span.name == "trainer.step" and span.outcome == "error" and span.source == "proc-a"
    assert span.attributes == {"mesh": "trainer", "actor_class": "Trainer", "rank": 3,
                               "method": "step", "bytes_in": 42}
    assert span.end_ns >= span.start_ns and len(span.span_id) == 8


def test_invocation_is_the_current_context_until_it_ends() -> None:
    site = invocation_site("trainer", "Trainer", 0, "step")
    invocation = begin_invocation(site, PARENT, 0)
    assert current_trace_context() == (PARENT[0], invocation[0][2])
    end_invocation(invocation)
    assert current_trace_context() is None


def test_invocation_without_parent_joins_the_current_context_or_starts_a_trace(
        recorder: Recorder, drain) -> None:
    outer = begin_invocation(invocation_site("m", "C", 0, "outer"), None, 0)
    invoke(method="inner", parent=None)
    end_invocation(outer)
    spans = {s.name: s for s in decode_batch(drain(recorder)).spans}
    assert spans["m.outer"].parent_span_id is None
    assert spans["trainer.inner"].trace_id == spans["m.outer"].trace_id
    assert spans["trainer.inner"].parent_span_id == spans["m.outer"].span_id


def test_invocations_feed_the_metrics_the_store_derives(recorder: Recorder, drain) -> None:
    for rank in (0, 1):
        for _ in range(3):
            invoke(rank=rank, nbytes=10)
    got = metrics_of(drain(recorder))
    labels = (("mesh", "trainer"), ("method", "step"))
    assert got[("messages_handled", labels)].value == 6
    latency = got[("handler_latency_seconds", labels)]
    assert latency.count == 6 and sum(latency.buckets) == 6
    assert latency.bounds == LATENCY_BOUNDS and latency.value >= 0
    assert got[("message_bytes", (("direction", "received"),))].value == 60


def test_derived_latency_buckets_like_observe() -> None:
    """A bound itself falls in its own bucket, as `MetricsTable.observe` counts it, whether
    the proc tallies drained spans (`latency_buckets`) or dropped ones one by one."""
    one_by_one = MetricsTable()
    seconds = [0.00005, 0.0001, 0.0003, 0.0003, 0.0011, 100.0]
    for value in seconds:
        one_by_one.observe(("handler_latency_seconds", "m", "f"), value)
    (a,) = [p for p in one_by_one.collect("p") if p.name == "handler_latency_seconds"]
    bounds_ns = [round(b * 1e9) for b in LATENCY_BOUNDS]
    assert tuple(_sites.latency_buckets([round(v * 1e9) for v in seconds], bounds_ns)) \
        == a.buckets
    tallies = _sites.Tallies()
    site = invocation_site("m", "C", 0, "f")
    for value in seconds:
        tallies.add((site.id, b"", b"", None, 0, 7, round(value * 1e9), "ok"))
    sites: list = []
    ((at, count, total_ns, nbytes, buckets, newest),) = tallies.take(sites, {})
    assert newest == round(100.0 * 1e9)
    assert sites[at] == ["m.f", site.attributes, "bytes_in", ["m", "f"]]
    assert (count, nbytes, tuple(buckets)) == (6, 42, a.buckets)
    assert abs(total_ns / 1e9 - a.value) < 1e-6


def test_full_buffer_drops_the_span_but_still_counts_the_invocation(drain) -> None:
    small = Recorder(max_spans=2)
    previous = set_process_recorder(small)
    try:
        for _ in range(5):
            invoke(nbytes=1)
    finally:
        set_process_recorder(previous)
    assert small.dropped()["span"] == 3 and small.statistics().pending["span"] == 2
    wire = drain(small)
    assert len(wire[8][0]) == 2  # the site index column
    assert [t[1] for t in wire[12]] == [5]  # the two drained and the three dropped
    got = metrics_of(wire)
    assert got[("messages_handled", (("mesh", "trainer"), ("method", "step")))].value == 5
    assert got[("message_bytes", (("direction", "received"),))].value == 5


def test_call_span_is_not_current_and_ends_once_on_any_thread(recorder: Recorder, drain) -> None:
    call = start_site_span(call_site("trainer", "step", "call"))
    assert current_trace_context() is None
    ender = threading.Thread(target=call.end, args=("error",))
    ender.start()
    ender.join()
    call.end("ok")
    (span,) = decode_batch(drain(recorder)).spans
    assert (span.trace_id, span.span_id) == call.context and span.parent_span_id is None
    assert span.name == "call trainer.step" and span.outcome == "error"
    assert span.attributes == {"mesh": "trainer", "method": "step", "adverb": "call"}


def test_begin_call_is_a_site_span_without_the_object(recorder: Recorder, drain) -> None:
    """The runtime's call span: not current, parented by the current context (a call made
    inside a handler joins its trace), recorded like `start_site_span`'s."""
    root = begin_call("trainer", "step", "call_one")
    assert current_trace_context() is None and root[3] is None  # a new trace
    token = set_trace_context(root[1:3])
    try:
        child = begin_call("gen", "go", "broadcast")
    finally:
        reset_trace_context(token)
    assert child[1] == root[1] and child[3] == root[2] and child[2] != root[2]
    end_call(child, "error")
    end_call(root)
    spans = decode_batch(drain(recorder)).spans
    assert [(s.name, s.outcome, s.parent_span_id) for s in spans] == [
        ("call gen.go", "error", root[2]), ("call trainer.step", "ok", None)]
    assert spans[1].attributes == {"mesh": "trainer", "method": "step", "adverb": "call_one"}
    assert (spans[1].trace_id, spans[1].span_id) == root[1:3]


def test_one_call_is_one_trace_in_the_store(recorder: Recorder, drain) -> None:
    call = start_site_span(call_site("trainer", "step", "call"))
    for rank in range(4):
        end_invocation(begin_invocation(invocation_site("trainer", "Trainer", rank, "step"),
                                        call.context, 8))
    call.end()
    store = Store()
    assert store.ingest(encode_batch(drain(recorder))) == 5  # the metrics: derived, not shipped
    handled = store.metrics(names=["messages_handled"])
    assert [(p.labels, p.value) for p in handled] == [({"mesh": "trainer", "method": "step"}, 4)]
    trace = store.spans(trace_id=call.context[0])
    assert [s.name for s in trace] == ["call trainer.step"] + ["trainer.step"] * 4
    assert all(s.parent_span_id == call.context[1] for s in trace[1:])
    assert sorted(s.attributes["rank"] for s in trace[1:]) == [0, 1, 2, 3]
    assert all(isinstance(s, SpanRecord) for s in trace)


def test_user_spans_and_site_spans_of_one_trace_come_back_together(recorder: Recorder,
                                                                    drain) -> None:
    invocation = begin_invocation(invocation_site("trainer", "Trainer", 0, "step"), PARENT, 0)
    start_span("user work").end()
    end_invocation(invocation)
    store = Store()
    store.ingest(encode_batch(drain(recorder)))
    trace = store.spans(trace_id=PARENT[0])
    assert [s.name for s in trace] == ["trainer.step", "user work"]  # by start time
    assert trace[1].parent_span_id == trace[0].span_id
    assert [s.name for s in store.spans(limit=1)] == ["trainer.step"]  # records, then site spans


def test_store_filters_site_spans_by_mesh_and_name(recorder: Recorder, drain) -> None:
    invoke(method="a")
    end_invocation(begin_invocation(invocation_site("gen", "Gen", 0, "b"), PARENT, 1))
    store = Store()
    store.ingest(drain(recorder))
    assert [s.name for s in store.spans(mesh="gen")] == ["gen.b"]
    assert [s.name for s in store.spans(name="trainer.a")] == ["trainer.a"]
    assert [s.name for s in store.spans(limit=1)] == ["gen.b"]


def test_a_wire_list_ingested_twice_is_read_twice(recorder: Recorder, drain) -> None:
    invoke()
    wire = drain(recorder)
    first, second = Store(), Store()
    assert first.ingest(wire) == second.ingest(wire)
    assert second.spans()[0].attributes["method"] == "step"
    assert second.statistics().invalid == 0


def test_malformed_site_span_columns_keep_the_readable_rows(recorder: Recorder, drain) -> None:
    for _ in range(4):
        invoke()
    wire = drain(recorder)
    sites, (indices, traces, spans, parents, starts, ends, outcomes, oi, values) = wire[7:9]
    good_span = spans[8:16]
    sites.append(["bad site", "not a map", None])
    indices[0] = 1  # the bad site
    starts[2] = "not an int"
    wire[8] = [indices, traces, spans, parents, starts, ends[:3], outcomes, oi, values]
    store = Store()
    assert store.ingest(encode_batch(wire)) is not None
    assert store.statistics().invalid == 3  # rows 0 and 2, and row 3 has no end
    assert [s.span_id for s in store.spans()] == [good_span]
    assert decode_batch(wire).invalid == 3


def test_site_span_columns_that_are_not_columns_are_counted(recorder: Recorder, drain) -> None:
    invoke()
    wire = drain(recorder)
    for garbage in (42, ["short"], [[True], b"", b"", b"", [], [], [], [], []]):
        wire[8] = garbage
        store = Store()
        assert store.ingest(wire) is not None
        assert store.statistics().invalid >= 1 and store.spans() == []


def test_site_span_subscribers_get_records(recorder: Recorder, drain) -> None:
    store = Store()
    sub = store.subscribe(["span"])
    invoke()
    store.ingest(encode_batch(drain(recorder)))
    (record,) = sub.poll()
    assert isinstance(record, SpanRecord) and record.name == "trainer.step"


def test_eviction_across_batches_keeps_the_newest(recorder: Recorder, drain) -> None:
    store = Store(max_spans=5)
    parents = []
    for batch in range(3):
        for i in range(3):
            parent = (bytes([batch * 3 + i + 1]) * 16, b"\x02" * 8)
            parents.append(parent)
            invoke(parent=parent)
        store.ingest(encode_batch(drain(recorder)))
    stats = store.statistics()
    assert stats.held["span"] == 5 and stats.evicted["span"] == 4
    assert [s.trace_id for s in store.spans()] == [p[0] for p in parents[4:]]
    assert store.spans(trace_id=parents[3][0]) == []
    assert len(store.spans(trace_id=parents[4][0])) == 1


def test_sites_are_made_once_and_found_by_id() -> None:
    site = invocation_site("m", "C", 0, "f")
    assert invocation_site("m", "C", 0, "f") is site and _sites.site_by_id(site.id) is site
    assert call_site("m", "f", "call") is not call_site("m", "f", "broadcast")


def test_pending_spans_are_left_alone_by_the_garbage_collector(recorder: Recorder) -> None:
    for _ in range(10):
        invoke()
    gc.collect()
    assert not any(gc.is_tracked(item) for item in recorder._site_spans)


def test_spans_table_of_many_batches_matches_their_records(recorder: Recorder, drain) -> None:
    """The Parquet history's spans table, built from several batches at once (each batch with
    its own sites and outcomes, a user span's batch between them, the oldest chunk partly
    evicted), holds exactly the spans' records, row for row."""
    from monarch.telemetry import _tables as tables

    store = Store(max_spans=20)
    for batch in range(4):
        call = start_site_span(call_site(f"mesh{batch}", "step", "call"))
        for rank in range(5):
            invocation = begin_invocation(
                invocation_site(f"mesh{batch % 2}", "Trainer", rank, "step"), call.context,
                1000 * batch + rank)
            end_invocation(invocation, "error" if rank == 3 else "ok")
        call.end("ok" if batch else "cancelled")
        store.ingest(encode_batch(drain(recorder)))
        if batch == 1:
            start_span("user work").end()
            store.ingest(encode_batch(drain(recorder)))
    records = store.spans(limit=10**6)  # oldest first, in the order the store holds them
    assert len(records) == 20 and store.statistics().evicted["span"] == 25 - 20
    assert store.span_chunks()[0][1] > 0  # the oldest chunk, partly evicted
    table = tables.spans(store.span_chunks())
    expected = tables.span_records(records)
    assert table.schema == expected.schema and table.num_rows == 20
    for column in table.column_names:
        if column != "attributes":  # a site's, without the span's own bytes_in
            assert table[column].to_pylist() == expected[column].to_pylist(), column
    calls = sum(1 for r in records if r.name.startswith("call ") or r.name == "user work")
    assert table["bytes_in"].null_count == calls > 0  # spans without a bytes_in
    assert table["parent_span_id"].null_count == calls  # the calls and the user span: roots
    assert sorted(set(table["outcome"].to_pylist())) == ["cancelled", "error", "ok"]


def test_a_pass_works_out_each_distinct_sites_columns_once(recorder: Recorder, drain,
                                                           monkeypatch) -> None:
    """Every batch of a proc brings its sites again: a pass over many batches makes the site
    columns (the attributes' JSON) once per distinct site, and a site whose attributes do not
    hash still gets its own."""
    from monarch.telemetry import _tables as tables

    store = Store()
    odd = SpanSite("odd", {"labels": ["a", "b"]})  # a list: not hashable
    for _ in range(6):
        for rank in range(2):
            end_invocation(begin_invocation(invocation_site("mesh", "Trainer", rank, "step"),
                                            None, 10), "ok")
        start_site_span(odd).end()
        store.ingest(encode_batch(drain(recorder)))
    made: list = []
    real = tables.json_text
    monkeypatch.setattr(tables, "json_text", lambda value: made.append(value) or real(value))
    table = tables.spans(store.span_chunks())
    assert table.num_rows == 18
    assert len([a for a in made if "labels" not in a]) == 2  # the two ranks' sites
    assert len([a for a in made if "labels" in a]) == 6  # one per batch: unhashable
    assert sorted(set(table["rank"].to_pylist()), key=str) == [0, 1, None]
