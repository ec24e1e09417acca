"""The admin API's top line sums each process's own points (`_admin_views.top_line`): the same
figures as summing the store's aggregated series, without a dataclass made per point."""

from __future__ import annotations

import random

from monarch.telemetry import MetricPoint, Store
from monarch._controller._admin_views import TOP_LINE_METRICS, headline, top_line

BOUNDS = (0.001, 0.01, 0.1, 1.0)


def from_aggregated(store: Store) -> dict:
    return headline(store.metrics(names=TOP_LINE_METRICS))  # one series per name and labels


def test_the_top_line_equals_the_sums_of_the_aggregated_series() -> None:
    rng = random.Random(3)
    store = Store()
    assert top_line(store) == from_aggregated(store)  # an empty job
    store.add(MetricPoint("start_to_first_proc_ready_seconds", "gauge", {}, 0.734,
                          source="controller"))
    for i in range(40):
        proc = f"p{i}"
        store.add(MetricPoint("messages_undelivered", "counter",
                              {"reason": rng.choice(["actor_stopped", "peer_gone"])},
                              float(rng.randrange(5)), source=proc))
        store.add(MetricPoint("job_failures", "counter",
                              {"cause": rng.choice(["user", "infrastructure"])},
                              float(rng.randrange(3)), source=proc))
        store.add(MetricPoint("stalled_handlers", "gauge", {}, float(rng.randrange(2)),
                              source=proc))
        buckets = tuple(rng.randrange(4) for _ in range(len(BOUNDS) + 1))
        store.add(MetricPoint("actor_spawn_seconds", "histogram", {"mesh": f"m{i % 3}"},
                              0.05 * sum(buckets), source=proc, count=sum(buckets),
                              bounds=BOUNDS, buckets=buckets))
        store.add(MetricPoint("messages_handled", "counter", {"mesh": "m"}, 1.0, source=proc))
    line = top_line(store)
    assert line == from_aggregated(store)
    assert line["first_proc_ready_s"] == 0.734 and line["actor_spawn_p50_ms"] is not None
    assert line["failures_user"] + line["failures_infrastructure"] > 0


def test_the_spawn_median_follows_a_series_replaced_in_place() -> None:
    """The headline keeps the spawn median while its points are the same objects; a proc that
    ships a changed histogram (a new point for the same series) moves it."""
    store = Store()

    def spawned(proc: str, buckets: tuple[int, ...]) -> None:
        store.add(MetricPoint("actor_spawn_seconds", "histogram", {"mesh": "m"}, 0.0,
                              source=proc, count=sum(buckets), bounds=BOUNDS, buckets=buckets))

    spawned("p0", (0, 4, 0, 0, 0))
    spawned("p1", (0, 4, 0, 0, 0))
    first = top_line(store)["actor_spawn_p50_ms"]
    assert first is not None and 1.0 <= first <= 10.0  # the (0.001, 0.01] bucket
    assert top_line(store)["actor_spawn_p50_ms"] == first
    spawned("p1", (0, 0, 0, 40, 0))  # the same series, slower spawns: a new point
    moved = top_line(store)["actor_spawn_p50_ms"]
    assert moved is not None and 100.0 <= moved <= 1000.0
    assert moved == from_aggregated(store)["actor_spawn_p50_ms"]
    spawned("p2", (0, 0, 0, 0, 0))  # a new series with no observations: the same median
    assert top_line(store)["actor_spawn_p50_ms"] == moved
