from __future__ import annotations

import threading

from monarch.telemetry import (
    BATCH_VERSION,
    FailureRecord,
    LogRecord,
    MetricPoint,
    SpanRecord,
    Store,
    TransferRecord,
    encode_batch,
)

SEC = 10**9


def log(hlc: int, text: str, proc: str = "p0", rank: int | None = 0, mesh: str = "trainer",
        stream: str = "stdout") -> LogRecord:
    return LogRecord(hlc, hlc, stream, 20, text, {"proc": proc, "pid": 1, "mesh": mesh,
                                                  "rank": rank})


def span(name: str, trace: bytes, sid: bytes, parent: bytes | None = None, start: int = 0,
         mesh: str | None = None) -> SpanRecord:
    attrs = {} if mesh is None else {"mesh": mesh}
    return SpanRecord(trace * 16, sid * 8, parent and parent * 8, name, start, start + 10, attrs,
                      "ok", "p0")


def batch(proc: str, pid: int, spans=(), logs=(), metrics=(), transfers=(), failures=()) -> list:
    return [BATCH_VERSION, {"proc": proc, "pid": pid, "host": "h"},
            [s.to_wire() for s in spans], [r.to_wire() for r in logs],
            [m.to_wire() for m in metrics], [t.to_wire() for t in transfers],
            [f.to_wire() for f in failures]]


def test_logs_are_ordered_by_hlc_whatever_the_arrival_order() -> None:
    store = Store()
    store.ingest(batch("p1", 2, logs=[log(30, "reply handled", "p1"), log(50, "z", "p1")]))
    store.ingest(encode_batch(batch("p0", 1, logs=[log(10, "sent"), log(40, "later")])))
    assert [r.text for r in store.logs()] == ["sent", "reply handled", "later", "z"]


def test_equal_stamps_tie_break_by_process() -> None:
    store = Store()
    store.ingest(batch("b", 2, logs=[log(7, "from b", "b")]))
    store.ingest(batch("a", 1, logs=[log(7, "from a", "a")]))
    assert [r.text for r in store.logs()] == ["from a", "from b"]


def test_log_filters_and_limits() -> None:
    store = Store()
    records = [log(i, f"line {i}", rank=i % 2, mesh="trainer" if i < 6 else "gen")
               for i in range(1, 11)]
    store.add_many(records)
    assert [r.hlc for r in store.logs(limit=3)] == [8, 9, 10]  # the last ones
    assert [r.hlc for r in store.logs(since_hlc=4, limit=3)] == [5, 6, 7]  # the next ones
    assert [r.hlc for r in store.logs(mesh="trainer", rank=1)] == [1, 3, 5]
    assert [r.hlc for r in store.logs(text="line 1")] == [1, 10]
    assert store.logs(stream="stderr") == []


def test_logs_beyond_capacity_evict_the_oldest() -> None:
    store = Store(max_logs=128)
    store.add_many(log(i, str(i)) for i in range(300))
    held = store.logs(limit=1000)
    assert 126 <= len(held) <= 128 and held[-1].hlc == 299
    assert store.statistics().evicted["log"] == 300 - len(held)


def test_spans_by_trace_and_by_mesh() -> None:
    store = Store()
    store.ingest(batch("p0", 1, spans=[
        span("call", b"a", b"1", start=1), span("Trainer.step", b"a", b"2", b"1", start=2,
                                                 mesh="trainer"),
        span("other", b"b", b"3", start=3, mesh="gen")]))
    assert [s.name for s in store.spans(trace_id=b"a" * 16)] == ["call", "Trainer.step"]
    assert [s.name for s in store.spans(mesh="gen")] == ["other"]
    assert [s.name for s in store.spans(limit=2)] == ["Trainer.step", "other"]


def test_span_eviction_keeps_the_trace_index_consistent() -> None:
    store = Store(max_spans=2)
    store.add_many([span("a", b"a", b"1"), span("b", b"b", b"2"), span("c", b"b", b"3")])
    assert store.spans(trace_id=b"a" * 16) == []
    assert [s.name for s in store.spans(trace_id=b"b" * 16)] == ["b", "c"]


def test_metrics_are_summed_over_processes_and_kept_for_dead_ones() -> None:
    def points(value: float, gauge: float) -> list[MetricPoint]:
        return [MetricPoint("messages_handled", "counter", {"mesh": "m"}, value, 1, "x"),
                MetricPoint("queue_depth", "gauge", {"actor": "m[0]"}, gauge, 1, "x")]

    store = Store()
    store.ingest(batch("p0", 1, metrics=[_src(p, "p0") for p in points(3, 1)]))
    store.ingest(batch("p1", 2, metrics=[_src(p, "p1") for p in points(4, 2)]))
    store.ingest(batch("p0", 1, metrics=[_src(p, "p0") for p in points(5, 0)]))  # update
    store.ingest(batch("p1", 3, metrics=[_src(p, "p1") for p in points(1, 0)]))  # restarted
    got = {(p.name, tuple(sorted(p.labels.items()))): p.value for p in store.metrics()}
    assert got[("messages_handled", (("mesh", "m"),))] == 5 + 4 + 1
    assert got[("queue_depth", (("actor", "m[0]"), ("proc", "p0")))] == 0
    assert len(store.metrics(by_process=True)) == 6


def _src(point: MetricPoint, source: str) -> MetricPoint:
    return MetricPoint(point.name, point.kind, point.labels, point.value, point.time_ns, source)


def test_histograms_sum_bucketwise() -> None:
    hist = MetricPoint("lat", "histogram", {}, 1.5, 1, "a", 3, (0.1, 1.0), (1, 1, 1))
    store = Store()
    store.add_many([hist, MetricPoint("lat", "histogram", {}, 0.5, 2, "b", 1, (0.1, 1.0),
                                      (0, 1, 0))])
    (merged,) = store.metrics()
    assert (merged.value, merged.count, merged.buckets) == (2.0, 4, (1, 2, 1))


def test_transfer_throughput_per_link_and_mesh() -> None:
    now = 100 * SEC
    store = Store()
    store.add_many([
        TransferRecord(1000, 0.1, "a", "b", "shm", now - 1 * SEC, "trainer"),
        TransferRecord(3000, 0.1, "a", "b", "shm", now - 2 * SEC, "trainer"),
        TransferRecord(500, 0.1, "b", "c", "tcp", now - 3 * SEC, "gen"),
        TransferRecord(9999, 0.1, "a", "b", "shm", now - 20 * SEC, "trainer"),  # too old
    ])
    summary = store.transfers(window=10.0, now_ns=now)
    assert summary.links[("a", "b")].nbytes == 4000
    assert summary.links[("a", "b")].bytes_per_s == 400.0
    assert summary.meshes["gen"].count == 1
    assert summary.kinds["shm"].nbytes == 4000
    assert summary.total.nbytes == 4500


def test_failures_and_resources_outlive_their_processes() -> None:
    store = Store()
    failure = FailureRecord("trainer", 3, "Trainer", "h", 77, None, 9, "killed by SIGKILL")
    store.ingest(batch("p3", 77, logs=[log(1, "last words", "p3", rank=3)], failures=[failure]))
    assert store.failures(mesh="trainer") == [failure]
    assert store.failures(mesh="gen") == []
    assert store.resources()["p3"]["pid"] == 77
    assert store.logs(rank=3)[0].text == "last words"


def test_bad_batches_are_counted_not_raised() -> None:
    store = Store()
    assert store.ingest(b"\xc1 not msgpack") is None
    assert store.ingest([99, {}, [], [], [], [], []]) is None
    good = batch("p0", 1, logs=[log(1, "ok")])
    good[3].append(["short"])
    assert store.ingest(good) is not None
    stats = store.statistics()
    assert stats.invalid == 3 and stats.held["log"] == 1


def test_subscribers_get_new_records_of_their_kinds() -> None:
    store = Store()
    woke = threading.Event()
    sub = store.subscribe(["log"], notify=woke.set)
    store.ingest(batch("p0", 1, logs=[log(1, "hi")], spans=[span("s", b"a", b"1")]))
    assert woke.is_set()
    assert [r.text for r in sub.wait(timeout=1)] == ["hi"]
    assert sub.poll() == []


def test_slow_subscriber_drops_and_counts() -> None:
    store = Store()
    sub = store.subscribe(["log"], maxsize=2)
    store.add_many(log(i, str(i)) for i in range(5))
    assert [r.text for r in sub.poll()] == ["0", "1"]
    assert sub.dropped == 3 and store.statistics().subscriber_drops == 3
    assert len(store.logs()) == 5  # the store itself lost nothing


def test_closed_subscription_wakes_its_reader_and_leaves_the_store() -> None:
    store = Store()
    sub = store.subscribe(["span"])
    got: list = []
    reader = threading.Thread(target=lambda: got.append(sub.wait(timeout=30)))
    reader.start()
    sub.close()
    reader.join(timeout=5)
    assert got == [[]] and store.statistics().subscribers == 0


def test_topology_snapshot() -> None:
    store = Store()
    assert store.topology() is None
    store.set_topology({"hosts": ["h"]})
    assert store.topology() == {"hosts": ["h"]}


def test_subscriber_whose_callback_raises_is_closed_not_the_store() -> None:
    store = Store()

    def broken() -> None:
        raise RuntimeError("consumer bug")

    bad = store.subscribe(["log"], notify=broken)
    good = store.subscribe(["log"])
    store.add(log(1, "x"))
    assert bad.closed and [r.text for r in good.poll()] == ["x"]
    assert store.statistics().subscribers == 1
