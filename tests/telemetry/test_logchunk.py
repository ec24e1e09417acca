"""A batch's log lines as columns (`telemetry._logchunk`): what a recorder drains reads back
line for line, columns that do not check out are salvaged line by line (the rest counted), and
the store keeps, journals and tables them without a record per line."""

from __future__ import annotations

import os

import msgpack
import pytest

from monarch.telemetry import LogRecord, Store, _tables
from monarch.telemetry._batch import BATCH_VERSION
from monarch.telemetry._logchunk import LogChunk, TagNumbers, read_columns, wire_columns
from monarch.telemetry._recorder import Recorder

TRACE, SPAN = os.urandom(16), os.urandom(8)


def drained(lines: int = 5) -> list:
    """A recorder's batch wire list of `lines` lines of two actors, the last ones in a trace."""
    recorder = Recorder()
    recorder.configure({"host": "h", "proc": "p0", "job": "j"})
    actors = [{"mesh": "m", "rank": 0}, {"mesh": "m", "rank": 1}]  # an actor's lines share one
    for i in range(lines):
        context = (TRACE, SPAN) if i >= 3 else None
        recorder.add_log((100 + i, 200 + i, "stdout", 20, f"line {i}", actors[i % 2], context))
    return msgpack.unpackb(recorder.drain_bytes(), strict_map_key=False)


def test_what_a_recorder_drains_reads_back_line_for_line() -> None:
    wire = drained()
    assert wire[3] == [] and len(wire[11]) == 2  # no row; a tags dict per distinct dict
    chunk, bad = read_columns(wire, lambda tags, number: tags)
    assert bad == 0 and chunk is not None and len(chunk) == 5
    records = chunk.records()
    assert [r.text for r in records] == [f"line {i}" for i in range(5)]
    assert [r.hlc for r in records] == [100, 101, 102, 103, 104]
    assert records[0].tags == {"host": "h", "proc": "p0", "job": "j", "pid": os.getpid(),
                               "mesh": "m", "rank": 0}
    assert records[0].tags is records[2].tags  # one dict per actor
    assert records[0].trace_id is None and (records[4].trace_id, records[4].span_id) == (
        TRACE, SPAN)


@pytest.mark.parametrize("spoil", [
    lambda c: c[0].__setitem__(1, "not a stamp"),
    lambda c: c[4].__setitem__(1, 7),  # a text that is not one
    lambda c: c[5].__setitem__(1, 9),  # a tags index out of the table
    lambda c: c[6].__setitem__(1, 3),  # a context that is not one
    lambda c: c[2].pop(),  # a column shorter than the others
])
def test_a_line_that_does_not_read_is_counted_and_the_others_kept(spoil) -> None:
    wire = drained()
    spoil(wire[13])
    chunk, bad = read_columns(wire, lambda tags, number: tags)
    assert bad == 1 and chunk is not None
    kept = [r.text for r in chunk.records()]
    assert len(kept) == 4 and "line 0" in kept


@pytest.mark.parametrize("garbage", [None, 7, "x", [1, 2], [[1], [2], [3], [4], [5], [6], 7]])
def test_garbage_in_place_of_the_columns_is_counted_never_raised(garbage) -> None:
    wire = drained()
    wire[13] = garbage
    chunk, bad = read_columns(wire, lambda tags, number: tags)
    assert chunk is None and (bad >= 1 or not garbage)


def test_the_store_keeps_journals_and_tables_the_lines_as_they_came() -> None:
    store = Store()
    journals = store.follow()
    store.ingest(msgpack.packb(drained(), use_bin_type=True))
    store.ingest(msgpack.packb(drained(), use_bin_type=True))
    assert [r.text for r in store.logs(limit=3)] == ["line 3", "line 4", "line 4"]
    assert store.statistics().ingested["log"] == 10 and store.statistics().held["log"] == 10
    items, _, _ = journals.since("log", 0)
    assert all(isinstance(item, LogChunk) for item in items) and len(items) == 2
    table = _tables.logs(items, {})
    assert table.num_rows == 10
    assert table["trace_id"].to_pylist()[3:5] == [TRACE.hex()] * 2
    assert table["trace_id"].to_pylist()[0] is None
    assert table["rank"].to_pylist()[:2] == [0, 1] and set(table["proc"].to_pylist()) == {"p0"}


def test_the_table_of_lines_that_all_have_a_context_is_the_same_in_one_pass() -> None:
    records = [LogRecord(i, i, "stdout", 20, f"t{i}", {"rank": i}, TRACE, SPAN)
               for i in range(4)]
    known: dict = {}
    table = _tables.logs([LogChunk.of_records(records)], known)
    assert table["trace_id"].to_pylist() == [TRACE.hex()] * 4
    assert table["span_id"].to_pylist() == [SPAN.hex()] * 4
    assert len(known) == 4  # each dict's JSON kept for the next pass
    again = _tables.logs([LogChunk.of_records(records)], known)
    assert again.equals(table)


def test_wire_columns_carry_each_tags_object_once_with_the_resource() -> None:
    a, b = {"mesh": "m", "rank": 0}, {"mesh": "m", "rank": 1}
    lines = [(1, 1, "stdout", 20, "x", a, None), (2, 2, "stderr", 30, "y", b, None),
             (3, 3, "stdout", 20, "z", a, None)]
    numbers = TagNumbers()
    columns, table, numbered = wire_columns(lines, {"proc": "p"}, numbers)
    assert columns[5] == [0, 1, 0] and table == [{"proc": "p", **a}, {"proc": "p", **b}]
    assert numbered == [1, 2] and wire_columns(lines[1:], {"proc": "p"}, numbers)[2] == [2, 1]
    assert columns[:5] == [[1, 2, 3], [1, 2, 3], ["stdout", "stderr", "stdout"], [20, 30, 20],
                           ["x", "y", "z"]]
    assert [BATCH_VERSION] != columns  # a plain list of columns, not a batch


def test_numbered_tags_share_one_dict_and_a_number_that_lies_is_not_believed() -> None:
    """The store shares the dict it made of a process's numbered tags without hashing them
    again; tags that differ from what the number named before are interned as they are."""
    store = Store()
    first, second = drained(), drained()
    assert first[14] == second[14] == [1, 2]  # the same tags objects: the same numbers
    store.ingest(msgpack.packb(first, use_bin_type=True))
    store.ingest(msgpack.packb(second, use_bin_type=True))
    lines = store.logs(limit=100)
    assert len({id(r.tags) for r in lines}) == 2
    liar = drained()
    liar[11][0]["rank"] = 99  # number 1 now comes with other tags
    store.ingest(msgpack.packb(liar, use_bin_type=True))
    assert sorted({r.tags["rank"] for r in store.logs(limit=100)}) == [0, 1, 99]


def test_the_lines_the_store_keeps_leave_nothing_for_the_garbage_collector_to_walk() -> None:
    """A full collection walks every object it tracks: the log book's rows and keys hold only
    atomic values (the tags in a list beside them, contexts as tuples), so once the collector
    has looked at them it stops tracking them (at 1,024 actors printing, rows that held their
    tags dict and a context list were 466k tracked objects and 170 ms full collections)."""
    import gc

    store = Store()
    batches = [msgpack.packb(drained(lines=500), use_bin_type=True) for _ in range(20)]
    gc.collect()
    before = len(gc.get_objects())
    for batch in batches:
        store.ingest(batch)
    gc.collect()
    assert store.statistics().held["log"] == 10_000
    assert len(gc.get_objects()) - before < 500, "a tracked object per line"
