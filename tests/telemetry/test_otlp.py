"""OTLP/HTTP export against a tiny receiver on loopback (real sockets)."""

from __future__ import annotations

import gzip
import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from monarch.telemetry import (
    BATCH_VERSION,
    LogRecord,
    OtlpConfig,
    OtlpExporter,
    SpanRecord,
    Store,
)


class Receiver:
    """Collects decoded OTLP requests posted to /v1/traces and /v1/logs; answers the first
    `refusals` POSTs with those statuses instead (a collector that is briefly unwell)."""

    def __init__(self, refusals: tuple[int, ...] = ()) -> None:
        self.requests: list[tuple[str, Any, Any]] = []  # (path, headers, request)
        self.refusals = list(refusals)
        self.refused = 0
        self.got = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver.got:
                    status = receiver.refusals.pop(0) if receiver.refusals else 200
                if status != 200:
                    receiver.refused += 1
                    self.send_response(status)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                receiver.record(self.path, self.headers, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def record(self, path: str, headers: Any, body: bytes) -> None:
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        cls = (trace_service_pb2.ExportTraceServiceRequest if path == "/v1/traces"
               else logs_service_pb2.ExportLogsServiceRequest)
        message = cls()
        message.ParseFromString(body)
        with self.got:
            self.requests.append((path, headers, message))
            self.got.notify_all()

    def wait_for(self, n: int) -> list[tuple[str, Any, Any]]:
        with self.got:
            assert self.got.wait_for(lambda: len(self.requests) >= n, timeout=10)
            return list(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def attrs(key_values: Any) -> dict[str, Any]:
    out = {}
    for kv in key_values:
        field = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, field)
    return out


CALL = SpanRecord(b"\x01" * 16, b"\x0a" * 8, None, "call Trainer.step", 1000, 9000,
                  {"mesh": "trainer"}, "ok", "controller")
INVOCATION = SpanRecord(b"\x01" * 16, b"\x0b" * 8, b"\x0a" * 8, "Trainer.step", 2000, 8000,
                        {"mesh": "trainer", "rank": 0, "bytes_in": 64}, "error", "proc-0")
LOG = LogRecord(5, 6000, "stdout", 20, "hello", {"proc": "proc-0", "pid": 42, "host": "h1",
                                                 "mesh": "trainer", "rank": 0},
                b"\x01" * 16, b"\x0b" * 8)


def config(receiver: Receiver, **env: str) -> OtlpConfig:
    return OtlpConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                                "OTEL_SERVICE_NAME": "my-job",
                                "OTEL_EXPORTER_OTLP_HEADERS": "x-token=s%20ecret",
                                "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
                                **env})


def test_spans_keep_parent_links_and_resources(receiver: Receiver) -> None:
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


def test_logs_carry_tags_severity_and_trace(receiver: Receiver) -> None:
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


def test_background_thread_follows_the_store(receiver: Receiver) -> None:
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
    receiver = Receiver(refusals=(status, status))
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
    receiver = Receiver(refusals=(400,))
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
    assert OtlpConfig.from_env({}).traces_endpoint == "http://localhost:4318/v1/traces"
    assert not OtlpConfig.from_env({"OTEL_SDK_DISABLED": "true"}).enabled
