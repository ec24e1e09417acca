from __future__ import annotations

from monarch.telemetry import MetricPoint, Recorder, set_queue_depth
from monarch.telemetry._metrics import LATENCY_BOUNDS


def points(wire: list) -> dict[tuple, MetricPoint]:
    found = [MetricPoint.from_wire(m) for m in wire[4]]
    return {(p.name, tuple(sorted(p.labels.items()))): p for p in found}


def test_metric_tables_become_metric_points(recorder: Recorder, drain) -> None:
    recorder.metrics.inc(("messages_handled", "trainer", "step"))
    recorder.metrics.inc(("messages_handled", "trainer", "step"))
    recorder.metrics.inc(("message_bytes", "sent"), 100)
    recorder.metrics.inc(("message_bytes", "sent"), 50)
    set_queue_depth("trainer[0]", 4)
    recorder.metrics.inc(("job_failures", "user"))
    got = points(drain(recorder))
    assert got[("messages_handled", (("mesh", "trainer"), ("method", "step")))].value == 2
    assert got[("message_bytes", (("direction", "sent"),))].value == 150
    assert got[("queue_depth", (("actor", "trainer[0]"),))].kind == "gauge"
    assert got[("job_failures", (("cause", "user"),))].kind == "counter"
    assert all(p.source == "proc-a" for p in got.values())


def test_latency_histogram_buckets(recorder: Recorder, drain) -> None:
    for seconds in (0.00005, 0.0003, 0.0003, 100.0):
        recorder.metrics.observe(("handler_latency_seconds", "trainer", "step"), seconds)
    hist = points(drain(recorder))[("handler_latency_seconds",
                                    (("mesh", "trainer"), ("method", "step")))]
    assert hist.kind == "histogram" and hist.count == 4
    assert abs(hist.value - 100.00065) < 1e-9
    assert hist.bounds == LATENCY_BOUNDS and len(hist.buckets) == len(LATENCY_BOUNDS) + 1
    assert hist.buckets[0] == 1 and hist.buckets[2] == 2 and hist.buckets[-1] == 1


def test_only_changed_series_are_drained_again(recorder: Recorder, drain) -> None:
    recorder.metrics.inc(("messages_handled", "a", "m"))
    recorder.metrics.inc(("messages_handled", "b", "m"))
    drain(recorder)
    recorder.metrics.inc(("messages_handled", "a", "m"))
    again = points(drain(recorder))
    assert list(again) == [("messages_handled", (("mesh", "a"), ("method", "m")))]
    assert next(iter(again.values())).value == 2  # cumulative
