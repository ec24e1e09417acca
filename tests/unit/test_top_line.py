"""The admin API's top line sums each process's own points (`_admin_views.top_line`): the same
figures as summing the store's aggregated series, without a dataclass made per point."""

from __future__ import annotations

import random

from monarch.telemetry import MetricPoint, Store
from monarch._controller._admin_views import TOP_LINE_METRICS, p50_ms, top_line

BOUNDS = (0.001, 0.01, 0.1, 1.0)


def from_aggregated(store: Store) -> dict:
    points = store.metrics(names=TOP_LINE_METRICS)  # one series per name and labels

    def total(name: str, **labels: str) -> float:
        return sum(p.value for p in points if p.name == name
                   and all(p.labels.get(k) == v for k, v in labels.items()))

    ready = [p.value for p in points if p.name == "start_to_first_proc_ready_seconds"]
    return {"first_proc_ready_s": round(ready[0], 3) if ready else None,
            "actor_spawn_p50_ms": p50_ms([p for p in points if p.name == "actor_spawn_seconds"]),
            "messages_undelivered": int(total("messages_undelivered")),
            "failures_user": int(total("job_failures", cause="user")),
            "failures_infrastructure": int(total("job_failures", cause="infrastructure")),
            "stalled_handlers": int(total("stalled_handlers"))}


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
