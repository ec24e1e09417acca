"""The admin topology's counters (`_admin_views.MetricIndex`, `p50_ms`): indexed once per poll
for every actor of a job, so computed in one pass; here against plain, slow references."""

from __future__ import annotations

import random

from monarch.telemetry import MetricPoint, Store
from monarch._controller._admin_views import MetricIndex, p50_ms

BOUNDS = (0.001, 0.01, 0.1, 1.0)


def median_ms(points: list[MetricPoint]) -> float | None:
    """The median of the histograms that share the first live one's bounds, walked bucket by
    bucket (interpolated in its bucket), in ms."""
    live = [p for p in points if p.count]
    if not live:
        return None
    bounds = live[0].bounds
    buckets = [0] * (len(bounds) + 1)
    for p in live:
        if p.bounds == bounds:
            buckets = [a + b for a, b in zip(buckets, p.buckets)]
    half, running = sum(buckets) / 2, 0
    for i, count in enumerate(buckets):
        if count and running + count >= half:
            low = bounds[i - 1] if i > 0 else 0.0
            high = bounds[i] if i < len(bounds) else low * 2 or 1.0
            return round((low + (high - low) * (half - running) / count) * 1000, 3)
        running += count
    return None


def histogram(rng: random.Random, bounds: tuple[float, ...] = BOUNDS) -> MetricPoint:
    buckets = tuple(rng.choice([0, 0, 1, 2, 7]) for _ in range(len(bounds) + 1))
    count = sum(buckets) if rng.random() < 0.9 else 0  # a histogram with no observations yet
    return MetricPoint("handler_latency_seconds", "histogram", {}, 1.0, count=count,
                       bounds=bounds, buckets=buckets)


def test_the_median_equals_a_bucket_by_bucket_walk() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        points = [histogram(rng, BOUNDS if rng.random() < 0.85 else (0.5, 1.0, 2.0, 4.0))
                  for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
        assert p50_ms(points) == median_ms(points), points


def test_an_actors_and_a_procs_counters_equal_plain_sums() -> None:
    rng = random.Random(11)
    store = Store()
    expected_actor: dict[tuple[str, str], list] = {}
    expected_proc: dict[str, dict[str, int]] = {}
    for t in range(1, 4):
        for i in range(6):
            proc = f"p{i}"
            sent, received = rng.randrange(1000), rng.randrange(1000)
            store.add(MetricPoint("message_bytes", "counter", {"direction": "sent"}, sent,
                                  source=proc))
            store.add(MetricPoint("message_bytes", "counter", {"direction": "received"},
                                  received, source=proc))
            failures = rng.randrange(3)
            store.add(MetricPoint("failures", "counter", {"mesh": "w"}, failures, source=proc))
            messages = 0
            for mesh in ("w", "v"):
                for method in ("step", "ping"):  # one series per method: summed
                    n = rng.randrange(50)
                    messages += n
                    store.add(MetricPoint("messages_handled", "counter",
                                          {"mesh": mesh, "method": method}, n,
                                          time_ns=t * 100 + rng.randrange(50), source=proc))
            expected_proc[proc] = {"messages": messages, "bytes_sent": sent,
                                   "bytes_received": received, "failures": failures}
    index = MetricIndex.of(store)
    points = store.metrics(by_process=True, names=("messages_handled",))
    for proc, counters in expected_proc.items():
        assert index.proc_counters(proc) == counters
        for mesh in ("w", "v"):
            mine = [p for p in points if p.source == proc and p.labels["mesh"] == mesh]
            newest = max(mine, key=lambda p: p.time_ns)
            messages, queue, p50, last = index.stats(proc, mesh, f"{mesh}[0]")
            assert (messages, queue, p50) == (int(sum(p.value for p in mine)), 0, None)
            assert last == newest.labels["method"]
    assert index.proc_counters("nobody") == {"messages": 0, "bytes_sent": 0,
                                             "bytes_received": 0, "failures": 0}
    assert index.stats("nobody", "w", "w[0]") == (0, 0, None, None)
