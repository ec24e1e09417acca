"""The invocation metrics the store derives from the site spans (`telemetry._invocations`)."""

from __future__ import annotations

from monarch.telemetry import (
    Recorder,
    Store,
    begin_invocation,
    call_site,
    encode_batch,
    end_invocation,
    invocation_site,
    start_site_span,
)
from monarch.telemetry._invocations import Invocations

LABELS = {"mesh": "trainer", "method": "step"}


def invoke(n: int, rank: int = 0, method: str = "step", nbytes: int = 10) -> None:
    site = invocation_site("trainer", "Trainer", rank, method)
    for _ in range(n):
        end_invocation(begin_invocation(site, None, nbytes))


def by_name(store: Store, **kw) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in store.metrics(by_process=True, **kw):
        out.setdefault(p.name, []).append(p)
    return out


def test_counts_add_up_across_batches_as_cumulative_series(recorder: Recorder, drain) -> None:
    store = Store()
    invoke(5)
    store.ingest(encode_batch(drain(recorder)))
    invoke(3, nbytes=1)
    store.ingest(encode_batch(drain(recorder)))
    got = by_name(store)
    (handled,) = got["messages_handled"]
    (latency,) = got["handler_latency_seconds"]
    (received,) = got["message_bytes"]
    assert (handled.labels, handled.value, handled.source) == (LABELS, 8, "proc-a")
    assert handled.kind == "counter" and handled.description == "Endpoint messages handled"
    assert latency.kind == "histogram" and latency.count == 8 and sum(latency.buckets) == 8
    assert latency.labels == LABELS and latency.value >= 0
    assert (received.labels, received.value) == ({"direction": "received"}, 53)
    assert handled.time_ns > 0  # the newest span's end


def test_each_process_and_method_is_a_series_of_its_own(recorder: Recorder, drain) -> None:
    store = Store()
    invoke(2, method="a")
    invoke(1, method="b")
    wire = drain(recorder)
    store.ingest(encode_batch(wire))
    wire[1] = {**wire[1], "proc": "proc-b"}  # the same spans from another proc
    store.ingest(encode_batch(wire))
    handled = {(p.source, p.labels["method"]): p.value
               for p in store.metrics(by_process=True, names=["messages_handled"])}
    assert handled == {("proc-a", "a"): 2, ("proc-a", "b"): 1, ("proc-b", "a"): 2,
                       ("proc-b", "b"): 1}
    total = {p.labels["method"]: p.value for p in store.metrics(names=["messages_handled"])}
    assert total == {"a": 4, "b": 2}  # aggregated over processes, as shipped points were


def test_call_spans_make_no_invocation_series(recorder: Recorder, drain) -> None:
    store = Store()
    start_site_span(call_site("trainer", "step", "call")).end()
    store.ingest(encode_batch(drain(recorder)))
    assert not by_name(store).keys() & {"messages_handled", "handler_latency_seconds",
                                        "message_bytes"}


def test_points_are_built_when_read_and_kept_until_the_series_changes(
        recorder: Recorder, drain) -> None:
    store = Store()
    invoke(2)
    store.ingest(encode_batch(drain(recorder)))
    first = store.metrics(by_process=True, names=["messages_handled"])
    assert store.metrics(by_process=True, names=["messages_handled"])[0] is first[0]
    invoke(1)
    store.ingest(encode_batch(drain(recorder)))
    (again,) = store.metrics(by_process=True, names=["messages_handled"])
    assert again is not first[0] and again.value == 3


def test_series_are_bounded_and_the_longest_silent_goes() -> None:
    table = Invocations(limit=5)  # a site: two series (count, latency); a process: one (bytes)
    sites = [["m.a", {}, "bytes_in", ["m", "a"]], ["m.b", {}, "bytes_in", ["m", "b"]]]
    buckets = [1] + [0] * 18
    assert table.add("p1", 1, sites, [[0, 1, 5, 0, buckets, 9]]) == (1, 0)
    assert len(table) == 3 and table.evicted == 0
    assert table.add("p2", 2, sites, [[1, 1, 5, 0, buckets, 9]]) == (1, 0)
    # p2's site fits (5); its bytes do not: p1's site, updated before p1's bytes, goes
    assert len(table) == 4 and table.evicted == 2
    assert {(p.source, p.name) for p in table.points()} == {
        ("p1", "message_bytes"), ("p2", "messages_handled"), ("p2", "handler_latency_seconds"),
        ("p2", "message_bytes")}


def test_unreadable_tallies_are_counted_and_skipped() -> None:
    store = Store()
    site = ["trainer.step", {"mesh": "trainer"}, "bytes_in", ["trainer", "step"]]
    good = [0, 2, 10, 4, [2] + [0] * 18]
    bad = [[5, 1, 1, 0, [1] + [0] * 18],  # no such site
           [0, "x", 1, 0, [1] + [0] * 18],  # a count that is not a number
           [0, 1, 1, 0, [1]],  # too few buckets
           "garbage"]
    wire = [1, {"proc": "p", "pid": 3}, [], [], [], [], [], [site], [], [], [], [],
            [good, *bad]]
    before = store.statistics().invalid
    store.ingest(encode_batch(wire))
    assert store.statistics().invalid - before == len(bad)
    (handled,) = store.metrics(by_process=True, names=["messages_handled"])
    assert handled.value == 2
    wire[12] = "not a list"
    store.ingest(encode_batch(wire))
    assert store.statistics().invalid - before == len(bad) + 1


def test_subscribers_to_metrics_get_the_derived_points(recorder: Recorder, drain) -> None:
    store = Store()
    subscription = store.subscribe(["metric"])
    invoke(2)
    store.ingest(encode_batch(drain(recorder)))
    got = {(r.name, r.value if r.name != "handler_latency_seconds" else r.count)
           for r in subscription.poll()}
    assert got == {("messages_handled", 2), ("handler_latency_seconds", 2),
                   ("message_bytes", 20)}


def test_a_batch_of_calls_and_invocations_counts_the_invocations_only(
        recorder: Recorder, drain) -> None:
    store = Store()
    call = start_site_span(call_site("trainer", "step", "call"))
    invoke(2, method="a", nbytes=5)
    invoke(1, method="b", nbytes=7)
    call.end()
    store.ingest(encode_batch(drain(recorder)))
    got = by_name(store)
    assert {p.labels["method"]: p.value for p in got["messages_handled"]} == {"a": 2, "b": 1}
    assert {p.labels["method"]: p.count for p in got["handler_latency_seconds"]} == {
        "a": 2, "b": 1}
    assert [p.value for p in got["message_bytes"]] == [17]


def test_a_busy_site_tallies_the_same_alone_or_among_others(recorder: Recorder,
                                                            drain) -> None:
    """The proc tallies a drain of one site at once and a drain of many sites site by site
    (the columns cut per site): the same spans count the same either way."""
    invoke(40)
    alone = by_name_of(drain(recorder))
    invoke(40)
    invoke(3, method="other", nbytes=1)
    mixed = by_name_of(drain(recorder))
    for got in (alone, mixed):
        latency = got[("handler_latency_seconds", "step")]
        assert got[("messages_handled", "step")].value == 40
        assert latency.count == sum(latency.buckets) == 40 and latency.value > 0
    assert mixed[("messages_handled", "step")].value == 40
    assert mixed[("messages_handled", "other")].value == 3
    assert mixed[("handler_latency_seconds", "step")].count == 40
    assert sum(mixed[("handler_latency_seconds", "other")].buckets) == 3
    assert alone[("message_bytes", None)].value == 400
    assert mixed[("message_bytes", None)].value == 403


def by_name_of(wire: list) -> dict:
    store = Store()
    store.ingest(encode_batch(wire))
    return {(p.name, p.labels.get("method")): p for p in store.metrics(by_process=True)}
