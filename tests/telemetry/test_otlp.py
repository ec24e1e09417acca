"""OTLP/HTTP export against a tiny receiver on loopback (real sockets, opentelemetry-proto)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from otlp_receiver import OtlpReceiver, attrs

from monarch.telemetry import (
    BATCH_VERSION,
    LogRecord,
    OtlpConfig,
    OtlpExporter,
    Recorder,
    SpanRecord,
    Store,
)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.close()


CALL = SpanRecord(b"\x01" * 16, b"\x0a" * 8, None, "call Trainer.step", 1000, 9000,
                  {"mesh": "trainer"}, "ok", "controller")
INVOCATION = SpanRecord(b"\x01" * 16, b"\x0b" * 8, b"\x0a" * 8, "Trainer.step", 2000, 8000,
                        {"mesh": "trainer", "rank": 0, "bytes_in": 64}, "error", "proc-0")
LOG = LogRecord(5, 6000, "stdout", 20, "hello", {"proc": "proc-0", "pid": 42, "host": "h1",
                                                 "mesh": "trainer", "rank": 0},
                b"\x01" * 16, b"\x0b" * 8)


def config(receiver: OtlpReceiver, **env: str) -> OtlpConfig:
    return OtlpConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                                "OTEL_SERVICE_NAME": "my-job",
                                "OTEL_EXPORTER_OTLP_HEADERS": "x-token=s%20ecret",
                                "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
                                **env})


def test_spans_keep_parent_links_and_resources(receiver: OtlpReceiver) -> None:
    store = Store()
    store.set_resource("proc-0", {"proc": "proc-0", "pid": 42, "host": "h1"})
    exporter = OtlpExporter(store, config(receiver))
    assert exporter.export_spans([CALL, INVOCATION])
    ((path, headers, request),) = receiver.wait_for(1)
    assert path == "/v1/traces" and headers["x-token"] == "s ecret"
    assert headers["Content-Type"] == "application/x-protobuf"
    by_proc = {attrs(rs.resource.attributes)["monarch.proc"]: rs
               for rs in request.resource_spans}
    resource = attrs(by_proc["proc-0"].resource.attributes)
    assert resource["service.name"] == "my-job" and resource["process.pid"] == 42
    assert resource["host.name"] == "h1" and resource["deployment.environment"] == "test"
    (child,) = by_proc["proc-0"].scope_spans[0].spans
    (parent,) = by_proc["controller"].scope_spans[0].spans
    assert child.parent_span_id == parent.span_id == b"\x0a" * 8
    assert child.trace_id == parent.trace_id == b"\x01" * 16 and parent.parent_span_id == b""
    assert attrs(child.attributes)["rank"] == 0 and child.status.code == 2
    assert (child.start_time_unix_nano, child.end_time_unix_nano) == (2000, 8000)


def test_logs_carry_tags_severity_and_trace(receiver: OtlpReceiver) -> None:
    exporter = OtlpExporter(Store(), config(receiver, OTEL_EXPORTER_OTLP_COMPRESSION="gzip"))
    assert exporter.export_logs([LOG])
    ((path, headers, request),) = receiver.wait_for(1)
    assert path == "/v1/logs" and headers["Content-Encoding"] == "gzip"
    (resource_logs,) = request.resource_logs
    assert attrs(resource_logs.resource.attributes)["host.name"] == "h1"
    (record,) = resource_logs.scope_logs[0].log_records
    assert record.body.string_value == "hello" and record.severity_text == "INFO"
    assert record.severity_number == 9 and record.time_unix_nano == 6000
    assert record.trace_id == b"\x01" * 16 and record.span_id == b"\x0b" * 8
    tags = attrs(record.attributes)
    assert (tags["mesh"], tags["rank"], tags["log.iostream"]) == ("trainer", 0, "stdout")


def test_background_thread_follows_the_store(receiver: OtlpReceiver) -> None:
    store = Store()
    exporter = OtlpExporter(store, config(receiver), interval_s=0.05).start()
    try:
        store.ingest([BATCH_VERSION, {"proc": "proc-0", "pid": 42}, [INVOCATION.to_wire()],
                      [LOG.to_wire()], [], [], []])
        paths = {path for path, _, _ in receiver.wait_for(2)}
    finally:
        exporter.stop()
    assert paths == {"/v1/traces", "/v1/logs"}
    stats = exporter.statistics()
    assert (stats.spans_sent, stats.logs_sent, stats.posts_failed) == (1, 1, 0)


def test_unreachable_endpoint_is_counted_not_raised() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    exporter = OtlpExporter(Store(), OtlpConfig.from_env(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
         "OTEL_EXPORTER_OTLP_TIMEOUT": "2000"}), retry_s=0.5, backoff_s=0.05)
    assert not exporter.export_spans([CALL])
    stats = exporter.statistics()
    assert stats.posts_failed == 1 and stats.records_failed == 1 and stats.last_error
    assert stats.retries >= 1  # refused connections are retried until retry_s ran out


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_a_collector_briefly_unwell_costs_nothing(status: int) -> None:
    receiver = OtlpReceiver(refusals=(status, status))
    try:
        exporter = OtlpExporter(Store(), config(receiver), backoff_s=0.01)
        assert exporter.export_spans([CALL])
        ((path, _, request),) = receiver.wait_for(1)
    finally:
        receiver.close()
    assert path == "/v1/traces" and receiver.refused == 2
    stats = exporter.statistics()
    assert (stats.spans_sent, stats.posts_failed, stats.retries) == (1, 0, 2)


def test_a_lasting_refusal_is_not_retried() -> None:
    receiver = OtlpReceiver(refusals=(400,))
    try:
        exporter = OtlpExporter(Store(), config(receiver), backoff_s=0.01)
        assert not exporter.export_spans([CALL])
    finally:
        receiver.close()
    stats = exporter.statistics()
    assert (stats.posts_failed, stats.retries, receiver.refused) == (1, 0, 1)


def test_config_from_standard_variables() -> None:
    cfg = OtlpConfig.from_env({
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://logs:9999/custom",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=2",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=3",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
        "OTEL_RESOURCE_ATTRIBUTES": "service.name=fallback,team=ml",
    })
    assert cfg.traces_endpoint == "http://collector:4318/v1/traces"
    assert cfg.logs_endpoint == "http://logs:9999/custom"
    assert cfg.traces_headers == {"a": "1", "b": "3"} and cfg.logs_headers == {"a": "1", "b": "2"}
    assert cfg.timeout_s == 2.5 and cfg.service_name == "fallback"
    assert cfg.resource_attributes == {"team": "ml"} and cfg.enabled
    assert cfg.metrics_endpoint == "http://collector:4318/v1/metrics"
    assert cfg.metrics_headers == {"a": "1", "b": "2"} and cfg.metrics_interval_s == 60.0
    assert cfg.metrics_enabled
    metrics = OtlpConfig.from_env({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:1/x",
                                   "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "c=4",
                                   "OTEL_METRIC_EXPORT_INTERVAL": "1500",
                                   "OTEL_METRICS_EXPORTER": "None"})
    assert metrics.metrics_endpoint == "http://m:1/x" and metrics.metrics_headers == {"c": "4"}
    assert metrics.metrics_interval_s == 1.5 and not metrics.metrics_enabled
    assert OtlpConfig.from_env({}).traces_endpoint == "http://localhost:4318/v1/traces"
    assert not OtlpConfig.from_env({"OTEL_SDK_DISABLED": "true"}).enabled


# -- metrics ---------------------------------------------------------------------------------------

def metrics_of(request: Any) -> dict[str, Any]:
    """name -> Metric of one ExportMetricsServiceRequest (one resource, one scope)."""
    (resource_metrics,) = request.resource_metrics
    (scope_metrics,) = resource_metrics.scope_metrics
    return {metric.name: metric for metric in scope_metrics.metrics}


def ship_metrics(store: Store, proc: str, handled: int, depth: float,
                 latencies: list[float]) -> None:
    """One proc's recorder counts, sets and observes, then ships to ``store`` as procs do."""
    recorder = Recorder()
    recorder.configure({"host": "h1", "proc": proc, "job": "j1"})
    recorder.metrics.inc(("messages_handled", "trainer", "step"), handled)
    recorder.metrics.set(("queue_depth", f"{proc}/trainer[0]"), depth)
    for seconds in latencies:
        recorder.metrics.observe(("handler_latency_seconds", "trainer", "step"), seconds)
    store.ingest(recorder.drain())


def test_metrics_arrive_with_names_values_and_attributes(receiver: OtlpReceiver) -> None:
    store = Store()
    ship_metrics(store, "proc-0", 3, 2.0, [0.0002, 0.3])
    ship_metrics(store, "proc-1", 4, 5.5, [0.0002, 0.0002, 100.0])
    exporter = OtlpExporter(store, config(receiver))
    assert exporter.export_metrics()
    (request,) = receiver.metric_requests()
    (resource_metrics,) = request.resource_metrics
    resource = attrs(resource_metrics.resource.attributes)
    assert resource["service.name"] == "my-job" and resource["deployment.environment"] == "test"
    metrics = metrics_of(request)

    handled = metrics["monarch_messages_handled"]  # a counter: summed over the procs
    assert handled.sum.is_monotonic and handled.sum.aggregation_temporality == 2  # cumulative
    (point,) = handled.sum.data_points
    assert point.as_int == 7 and attrs(point.attributes) == {"mesh": "trainer", "method": "step"}
    assert 0 < point.start_time_unix_nano <= point.time_unix_nano

    depth = metrics["monarch_queue_depth"]  # a gauge: one series per proc
    assert {attrs(p.attributes)["proc"]: (p.as_double, attrs(p.attributes)["actor"])
            for p in depth.gauge.data_points} == {"proc-0": (2.0, "proc-0/trainer[0]"),
                                                   "proc-1": (5.5, "proc-1/trainer[0]")}

    latency = metrics["monarch_handler_latency_seconds"]  # a histogram: buckets summed
    assert latency.histogram.aggregation_temporality == 2
    (point,) = latency.histogram.data_points
    assert point.count == 5 and point.sum == pytest.approx(100.3006)
    assert list(point.explicit_bounds)[:2] == [0.0001, 0.00025]
    assert len(point.bucket_counts) == len(point.explicit_bounds) + 1
    assert point.bucket_counts[1] == 3 and point.bucket_counts[-1] == 1  # (.1, .25] ms; > 60 s
    assert point.bucket_counts[list(point.explicit_bounds).index(0.5)] == 1  # 0.3 s
    assert sum(point.bucket_counts) == 5
    assert attrs(point.attributes) == {"mesh": "trainer", "method": "step"}
    assert exporter.statistics().metric_points_sent == 4  # 1 counter + 2 gauges + 1 histogram


def handled_values(receiver: OtlpReceiver) -> list[int]:
    """messages_handled as each metrics request carried it."""
    return [point.as_int for request in receiver.metric_requests()
            for point in metrics_of(request)["monarch_messages_handled"].sum.data_points]


def test_metrics_are_sent_every_interval(receiver: OtlpReceiver) -> None:
    store = Store()
    ship_metrics(store, "proc-0", 1, 0.0, [])
    exporter = OtlpExporter(store, config(receiver, OTEL_METRIC_EXPORT_INTERVAL="50"),
                            interval_s=0.05).start()
    try:
        receiver.wait_until(lambda: 1 in handled_values(receiver))
        ship_metrics(store, "proc-0", 5, 0.0, [])  # the proc's newest value: 5
        receiver.wait_until(lambda: 5 in handled_values(receiver))
    finally:
        exporter.stop()


def test_metrics_are_sent_at_stop(receiver: OtlpReceiver) -> None:
    store = Store()
    exporter = OtlpExporter(store, config(receiver, OTEL_METRIC_EXPORT_INTERVAL="3600000"),
                            interval_s=0.05).start()
    ship_metrics(store, "proc-0", 9, 0.0, [])
    exporter.stop()  # an hour before the first interval ends: only stop sends them
    assert handled_values(receiver) == [9]


def test_no_metrics_when_the_metrics_exporter_is_none(receiver: OtlpReceiver) -> None:
    store = Store()
    exporter = OtlpExporter(store, config(receiver, OTEL_METRICS_EXPORTER="none"),
                            interval_s=0.05).start()
    ship_metrics(store, "proc-0", 9, 0.0, [])
    store.ingest([BATCH_VERSION, {"proc": "proc-0"}, [INVOCATION.to_wire()], [], [], [], []])
    receiver.wait_for(1)
    exporter.stop()
    assert [path for path, _, _ in receiver.requests] == ["/v1/traces"]


def test_metrics_posts_are_retried_too() -> None:
    receiver = OtlpReceiver(refusals=(503,))
    try:
        store = Store()
        ship_metrics(store, "proc-0", 2, 0.0, [])
        exporter = OtlpExporter(store, config(receiver), backoff_s=0.01)
        assert exporter.export_metrics()
    finally:
        receiver.close()
    assert handled_values(receiver) == [2] and receiver.refused == 1
    assert exporter.statistics().retries == 1
