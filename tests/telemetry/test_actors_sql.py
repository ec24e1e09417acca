"""Actor statuses, stalls and flight records in the store, and SQL over its tables
(process-free: batches are built by hand, as a proc's recorder ships them)."""

from __future__ import annotations

import pytest
from monarch.telemetry import (BATCH_VERSION, ActorStatus, MessageRecord, RunningHandler, Store,
                               message_group)
from monarch.telemetry._sql import QueryError, named_tables, query
from monarch.telemetry._tables import store_tables

S = 1_000_000_000


def batch(statuses=(), messages=()) -> list:
    """A batch as a proc ships it: its flight records as one group per actor."""
    groups: dict = {}
    for m in messages:
        groups.setdefault((m.actor, m.mesh_name, m.rank), []).append(
            (m.method, m.sender, m.start_ns, m.end_ns, m.outcome, m.nbytes))
    return [BATCH_VERSION, {"proc": "p-0", "pid": 7}, [], [], [], [], [], [], [],
            [s.to_wire() for s in statuses],
            [message_group(*key, entries) for key, entries in groups.items()]]


def status(running=(), queued=(), state="running") -> ActorStatus:
    return ActorStatus("gen-1[0]", "gen-1", "gen", 0, "Gen", state, tuple(running),
                       len(queued), tuple(queued), 10 * S)


def test_a_handler_past_the_threshold_is_stalled_once_then_resumed() -> None:
    store = Store()
    handler = RunningHandler("generate", 10 * S, "root", "ab" * 16, 12)
    store.ingest(batch([status([handler], ["weights"])]))
    assert store.check_stalls(5.0, now_ns=12 * S) == 0
    assert store.check_stalls(5.0, now_ns=16 * S) == 1
    assert store.check_stalls(5.0, now_ns=17 * S) == 1  # still stalled: no second event
    store.ingest(batch([status()]))
    assert [(e.event, e.detail) for e in store.status_events()] == [
        ("running", ""), ("stalled", "generate"), ("resumed", "generate")]
    assert store.actor_statuses()["gen-1[0]"].running == ()


def test_sql_over_the_store_and_the_engines_message_for_a_bad_statement() -> None:
    store = Store()
    records = [MessageRecord("gen-1[0]", "gen", 0, m, "root", i * S, i * S + 2_000_000, "ok", 5)
               for i, m in enumerate(["meet", "step", "step"])]
    store.ingest(batch([status()], records))
    sources = {n: (lambda t=t: t) for n, t in store_tables(store, ["messages"]).items()}
    result = query("SELECT method, count(*) AS n, avg(duration_ms) AS ms FROM messages "
                   "GROUP BY method ORDER BY method", sources)
    assert result.to_pylist() == [{"method": "meet", "n": 1, "ms": 2.0},
                                  {"method": "step", "n": 2, "ms": 2.0}]
    assert named_tables("select * from spans join logs using (trace_id)") == {"spans", "logs"}
    with pytest.raises(QueryError, match="nope"):
        query("SELECT nope FROM messages", sources)
    with pytest.raises(QueryError, match="ParserError"):
        query("selec 1", sources)


def test_flight_records_travel_as_groups_and_a_bad_entry_is_skipped_and_counted() -> None:
    store = Store()
    good = ("step", "root", 1 * S, 2 * S, "ok", 5)
    store.ingest([BATCH_VERSION, {"proc": "p-0", "pid": 7}, [], [], [], [], [], [], [], [], [
        message_group("gen-1[0]", "gen", 0, [good, ("step", "root", "not a time"), "junk",
                                             ("meet", "root", 3 * S, 4 * S, "error", None)]),
        ["no", "group"],  # a malformed group is counted and skipped
        message_group("gen-1[1]", "gen", 1, [good], source="elsewhere")]])
    assert store.statistics().invalid == 3  # the group and two entries
    assert [(m.actor, m.method, m.outcome, m.nbytes, m.source) for m in store.messages()] == [
        ("gen-1[0]", "step", "ok", 5, "p-0"), ("gen-1[0]", "meet", "error", 0, "p-0"),
        ("gen-1[1]", "step", "ok", 5, "elsewhere")]
    assert [m.method for m in store.messages(actor="gen-1[0]", limit=1)] == ["meet"]
    assert store.messages(limit=0) == []


def test_the_store_keeps_the_newest_messages_and_the_recorder_drops_what_does_not_fit() -> None:
    from monarch.telemetry import Recorder

    store = Store(max_messages=100)
    for i in range(3):  # 150 entries: the oldest group goes, 100 stay
        entries = [(f"m{i}", "root", j, j + 1, "ok", 0) for j in range(50)]
        store.ingest(batch=[BATCH_VERSION, {"proc": "p-0"}, [], [], [], [], [], [], [], [],
                            [message_group("a[0]", "a", 0, entries)]])
    kept = store.messages()
    assert len(kept) == 100 and {m.method for m in kept} == {"m1", "m2"}
    newest = store.messages(limit=60)  # the newest 60: 10 of the second group, all the third
    assert [m.method for m in newest] == ["m1"] * 10 + ["m2"] * 50
    assert [m.start_ns for m in newest[:10]] == list(range(40, 50))

    recorder = Recorder(max_logs=60)  # its flight-record buffer is as big as its log buffer
    recorder.add_message_group(message_group("a[0]", "a", 0, [("x", "root", 0, 1, "ok", 0)] * 50))
    recorder.add_message_group(message_group("a[0]", "a", 0, [("y", "root", 0, 1, "ok", 0)] * 50))
    assert recorder.dropped()["message"] == 40
    wire = recorder.drain()  # 50 entries travel as columns, 10 as rows
    assert isinstance(wire[10][0][4], dict) and isinstance(wire[10][1][4], list)
    assert [len(wire[10][0][4]["m"]), len(wire[10][1][4])] == [50, 10]
    assert wire[10][1][4][0][0] == "y"  # the newest of what did not fit are kept


def test_messages_table_of_good_and_bad_groups_matches_their_rows() -> None:
    """A well-formed group is read column by column and any other row by row: either way,
    the ``messages`` table has exactly the rows `message_rows` gives, in order."""
    import pyarrow as pa
    from monarch.telemetry._actors import message_rows, read_message_groups
    from monarch.telemetry._arrow import from_rows
    from monarch.telemetry._tables import messages

    good = [(f"m{i}", f"ctrl-{i % 3}", i * S, i * S + 5, "ok" if i % 4 else "error", 10 * i)
            for i in range(50)]
    groups = [
        ("gen-1[0]", "gen", 0, "p-0", good),
        ("gen-1[1]", "gen", 1, "p-1", []),
        ("gen-1[2]", "gen", 2, "p-2", [("f", 7, 1, 2, "ok", True),  # a bool is no byte count
                                       ("g", "s", 1, 2, "ok", 3, "an extra field"),
                                       ("h", "s", "not an int", 2, "ok", 3),
                                       ("too", "short"), 42,
                                       ("i", None, 5, 9, "cancelled", 0)]),
        ("tr-1[0]", "tr", 0, "p-3", [row + ("extra",) for row in good[:5]]),
    ]
    groups, bad = read_message_groups([list(g) for g in groups], "")
    assert bad == 3  # h, too short, 42
    table = messages(groups)
    expected = from_rows("messages", [
        (actor, name, rank, method, sender, start, end, (end - start) / 1e6, outcome, nbytes,
         source)
        for actor, name, rank, method, sender, start, end, outcome, nbytes, source
        in message_rows(groups)])
    assert table.schema == expected.schema
    assert table.to_pylist() == expected.to_pylist()
    assert table.num_rows == 50 + 3 + 5  # f, g and i of the bad group
    assert table["sender"].to_pylist()[50:53] == ["7", "s", "None"]
    assert table["bytes"].to_pylist()[50:53] == [0, 3, 0]
    assert messages([]).num_rows == 0 and isinstance(messages([]), pa.Table)


def test_kept_flight_records_cost_the_garbage_collector_nothing() -> None:
    # A controller keeps ~100k entries; as the lists msgpack decodes they stayed tracked, and
    # every full collection walked them all (with torch imported, ~0.2 s each here).
    import gc

    import msgpack

    store = Store()
    entries = [(f"m{j}", "root", j, j + 1, "ok", 0) for j in range(100)]
    store.ingest(msgpack.packb([BATCH_VERSION, {"proc": "p-0"}, [], [], [], [], [], [], [], [],
                                [message_group("a[0]", "a", 0, entries)]]))
    gc.collect()
    (group,) = store.actors.messages.groups()
    entries = group[4]
    assert len(entries) == 100
    # kept as columns, whatever the entry count: text as untracked tuples of strings, numbers
    # as arrays of machine integers (objects that refer to no other object)
    from array import array

    columns = [getattr(entries, name) for name in entries.__slots__]
    assert len(columns) == 7  # method, sender, start, end, outcome, bytes, sent_hlc
    assert all(gc.get_referents(c) in ([], [array]) if isinstance(c, array) else not gc.is_tracked(c)
               for c in columns)
    assert [m.method for m in store.messages(limit=2)] == ["m98", "m99"]


def test_a_failure_seen_twice_is_one_event() -> None:
    """The controller records a failure, then the proc's status says `failed` too: `monarch
    inspect` listed the failure twice."""
    from monarch.telemetry import StatusEvent

    store = Store()
    store.add_event(StatusEvent(1, "m-1[3]", "trainers", 3, "failed", "Killed(sig=9)", "p-3"))
    store.add_event(StatusEvent(2, "m-1[3]", "trainers", 3, "failed", "", "p-3"))
    store.add_event(StatusEvent(3, "m-1[2]", "trainers", 2, "stalled", "step", "p-2"))
    store.add_event(StatusEvent(4, "m-1[2]", "trainers", 2, "stalled", "save", "p-2"))
    assert [(e.actor, e.event, e.detail) for e in store.status_events()] == [
        ("m-1[3]", "failed", "Killed(sig=9)"), ("m-1[2]", "stalled", "step"),
        ("m-1[2]", "stalled", "save")]


def test_entries_travel_as_columns_and_read_as_the_rows_would() -> None:
    """A recorder ships a group's entries as columns (`pack_columns`): the controller reads
    the same entries as from the rows; rows a column cannot hold (a bool byte count, a number
    past int64) travel as rows; broken columns are refused whole and counted."""
    from monarch.telemetry._actors import COLUMNS_FROM, Entries, pack_columns

    few = [("m", "ctrl", 1, 2, "ok", 3, 4)] * (COLUMNS_FROM - 1)
    assert pack_columns(few) is few  # a small group reads no faster as columns
    rows = [(f"m{i % 3}", f"ctrl-{i % 2}", i, i + 5, "ok", 10 * i, 1000 + i) for i in range(20)]
    columns = pack_columns(rows)
    assert isinstance(columns, dict) and len(columns["t0"]) == 8 * len(rows)
    from_columns, bad = Entries.read(columns)
    from_rows, bad_rows = Entries.read(rows)
    assert bad == bad_rows == 0
    assert list(from_columns) == list(from_rows) == [r[:6] for r in rows]
    assert list(from_columns.sents) == [r[6] for r in rows]
    six = [r[:6] for r in rows]  # from a sender that ships no HLC: zeros
    assert list(Entries.read(pack_columns(six))[0].sents) == [0] * len(rows)

    odd = [("f", "s", 1, 2, "ok", True)] * COLUMNS_FROM
    assert pack_columns(odd) is odd  # read row by row: a bool is no byte count
    huge = [("f", "s", 2**63, 2**63 + 1, "ok", 0)] * COLUMNS_FROM
    assert pack_columns(huge) is huge

    for broken in ({**columns, "t1": columns["t1"][:-8]}, {**columns, "m": columns["m"][:-1]},
                   {k: v for k, v in columns.items() if k != "n"},
                   {**columns, "o": [1] * len(rows)}, {**columns, "t0": "not bytes"}):
        kept, bad = Entries.read(broken)
        assert len(kept) == 0 and bad >= 1


def test_a_recorders_columns_reach_the_store_whole() -> None:
    """End to end: what a recorder drains (columns) the store ingests as messages, none
    counted bad (a group whose entries were not a list was once refused whole)."""
    from monarch.telemetry import Recorder

    recorder = Recorder()
    rows = [("step", "root", i, i + 3, "ok", 8, 0) for i in range(30)]
    recorder.add_message_group(message_group("a[0]", "a", 0, rows))
    wire = recorder.drain()
    assert isinstance(wire[10][0][4], dict)  # as columns
    store = Store()
    store.ingest(batch=wire)
    assert [(m.method, m.start_ns, m.end_ns) for m in store.messages()] == \
        [("step", i, i + 3) for i in range(30)]
    assert store.statistics().invalid == 0


def test_one_actors_flight_records_are_its_own_as_groups_come_and_go() -> None:
    """The store finds one actor's groups without a walk over all of them (`MessageLog`
    keeps them apart), and what it finds is what a walk finds, as groups are evicted."""
    import random

    from monarch.telemetry._messagelog import MessageLog

    rng = random.Random(7)
    log = MessageLog(max_messages=300)
    actors = [f"m[{i}]" for i in range(12)]
    for step in range(400):
        actor = rng.choice(actors)
        entries = [(f"s{step}", "root", j, j + 1, "ok", 0) for j in range(rng.randint(1, 30))]
        log.extend([(actor, "m", int(actor[2:-1]), "p-0", entries)])
        if step % 37 == 0:
            for who in actors + ["m[99]"]:
                assert log.groups(who) == [g for g in log if g[0] == who], (step, who)
    assert log.records <= 300 and set(log._by_actor) <= set(actors)
    assert sum(len(found) for found in log._by_actor.values()) == len(list(log))
    store = Store(max_messages=100)
    for i in range(3):
        entries = [(f"m{i}", "root", j, j + 1, "ok", 0) for j in range(50)]
        store.ingest(batch=[BATCH_VERSION, {"proc": "p-0"}, [], [], [], [], [], [], [], [],
                            [message_group("a[0]", "a", 0, entries),
                             message_group("b[0]", "b", 0, entries[:1])]])
    assert [m.method for m in store.messages(actor="b[0]")] == ["m1", "m2"]
    assert {m.actor for m in store.messages(actor="a[0]")} == {"a[0]"}
