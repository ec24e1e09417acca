"""The store's byte budget: estimates that hold against real allocations, and bounds that
hold however much arrives."""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from typing import Any

import msgpack
import pytest

from monarch.telemetry import Store
from monarch.telemetry._batch import BATCH_VERSION
from monarch.telemetry._budget import Budget

N = 2048  # records of each kind per batch, as a busy proc ships them


def _batch(k: int, *, spans: bool = False, logs: bool = False, messages: bool = False,
           lines: int = N) -> bytes:
    """A proc's batch of ``N`` spans, ``lines`` log lines (as columns, as a recorder ships
    them) and a group of ``N`` flight records, each kind if asked for."""
    t = time.time_ns() + k * N * 1000
    proc = f"p{k % 8}"
    site_spans: list[Any] = []
    sites: list[Any] = []
    if spans:
        sites = [["m0.step", {"mesh": "m0", "rank": k % 8, "method": "step",
                              "actor_class": "W"}, "bytes_in"]]
        site_spans = [[0] * N, os.urandom(16 * N), os.urandom(8 * N), bytes(8 * N),
                      [t + i * 1000 for i in range(N)], [t + i * 1000 + 500 for i in range(N)],
                      ["ok"], [0] * N, [4200 + i for i in range(N)]]
    tags = [{"host": "h", "proc": proc, "pid": 1234 + k % 8, "mesh": "m0", "actor_class": "W",
             "rank": k % 8, "job": "j"}]
    log_columns = [[t + i for i in range(lines)], [t + i for i in range(lines)],
                   ["stdout"] * lines, [20] * lines,
                   [f"rank {k % 8} step {i} loss {i * 0.37:.4f}" for i in range(lines)],
                   [0] * lines, [None] * lines] if logs else []
    groups = [[f"m0[{k % 8}]", "m0", k % 8, "", [
        ["step", "root", t + i * 1000, t + i * 1000 + 500, "ok", 4200 + i] for i in range(N)]]
    ] if messages else []
    return msgpack.packb([BATCH_VERSION, {"proc": proc, "pid": 1234 + k % 8}, [], [], [],
                          [], [], sites, site_spans, [], groups, tags, [], log_columns])


@pytest.mark.parametrize("kind", ["span", "log", "message"])
def test_each_estimate_is_at_least_what_the_records_really_take(kind: str) -> None:
    batches = [_batch(k, **{kind + "s": True}) for k in range(24)]
    store = Store()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for batch in batches:
            store.ingest(batch)
        del batches
        gc.collect()
        actual = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    estimated = store.statistics().held_bytes[kind]
    assert store.statistics().held[kind] == 24 * N
    # never under (the budget must hold), and not so far over that it wastes the budget
    assert actual <= estimated <= 1.6 * actual, (actual, estimated)


def test_every_part_stays_within_its_share_however_much_arrives() -> None:
    budget = Budget(6_000_000)
    store = Store(budget=budget)
    journals = store.follow()
    for k in range(120):  # ~20x what the budget holds (~10x of the lines)
        # a journal keeps whole items: a chunk of lines must fit its share (264 kB) to be kept
        store.ingest(_batch(k, spans=True, logs=True, messages=True, lines=N // 8))
    stats = store.statistics()
    for part in ("span", "log", "message"):
        assert 0 < stats.held_bytes[part] <= budget.of(part), part
        assert stats.evicted.get(part, 0) > 0 or part == "message", part
    assert stats.held_bytes["journal"] <= budget.of("journal")
    # the newest is what stays, and nothing the follower released is held twice
    assert store.logs(limit=1)[0].text.startswith(f"rank 7 step {N // 8 - 1}")
    assert journals.lost > 0  # nobody followed: the oldest went, and were counted
    items, cursor, _ = journals.since("log", 0)
    journals.release("log", cursor)
    assert journals.by_kind["log"].bytes == 0 and journals.since("log", cursor)[0] == []
    assert items and sum(map(len, items)) < 120 * N // 8


def test_log_lines_of_one_actor_share_their_tags() -> None:
    store = Store()
    store.ingest(_batch(0, logs=True))
    store.ingest(_batch(8, logs=True))  # the same proc and rank: the same tags
    lines = store.logs(limit=10_000)
    assert len(lines) == 2 * N
    assert len({id(line.tags) for line in lines}) == 1
    assert lines[0].tags["rank"] == 0 and lines[-1].text == f"rank 0 step {N - 1} loss " \
        f"{(N - 1) * 0.37:.4f}"


def test_a_metric_series_past_the_bound_replaces_the_longest_silent_one() -> None:
    from monarch.telemetry import MetricPoint

    store = Store(max_series=3)
    for name in ("a", "b", "c"):
        store.add(MetricPoint(name, "gauge", {}, 1.0, source="p"))
    store.add(MetricPoint("a", "gauge", {}, 2.0, source="p"))  # a spoke again
    store.add(MetricPoint("d", "gauge", {}, 1.0, source="p"))  # a new proc's series comes in
    assert sorted(p.name for p in store.metrics(by_process=True)) == ["a", "c", "d"]
    assert store.statistics().evicted["metric"] == 1


def test_metrics_of_some_names_are_read_from_their_index_and_follow_evictions() -> None:
    """`metrics(names=...)` reads the series of those names only (the top line's poll); what
    it returns stays what filtering every series would, through replacements and evictions."""
    import random

    from monarch.telemetry import MetricPoint

    rng = random.Random(7)
    store = Store(max_series=40)
    for i in range(2000):
        name = rng.choice("abcdef")
        store.add(MetricPoint(name, rng.choice(["counter", "gauge"]),
                              {"k": str(rng.randrange(12))}, float(i),
                              source=f"p{rng.randrange(3)}"))
        if i % 97 == 0:
            names = set(rng.sample("abcdefg", 3))
            every = store.metrics(by_process=True)
            assert sorted(map(repr, store.metrics(by_process=True, names=names))) == sorted(
                repr(p) for p in every if p.name in names)
            assert store.metrics(names=names) == [p for p in store.metrics()
                                                  if p.name in names]
    assert store.statistics().evicted["metric"] > 0


def test_a_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="positive number of MB"):
        Budget.from_mb(0)
