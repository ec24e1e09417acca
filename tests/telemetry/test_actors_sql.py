"""Actor statuses, stalls and flight records in the store, and SQL over its tables
(process-free: batches are built by hand, as a proc's recorder ships them)."""

from __future__ import annotations

import pytest
from monarch.telemetry import BATCH_VERSION, ActorStatus, MessageRecord, RunningHandler, Store
from monarch.telemetry._sql import QueryError, named_tables, query
from monarch.telemetry._tables import store_tables

S = 1_000_000_000


def batch(statuses=(), messages=()) -> list:
    return [BATCH_VERSION, {"proc": "p-0", "pid": 7}, [], [], [], [], [], [], [],
            [s.to_wire() for s in statuses], [m.to_wire() for m in messages]]


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
