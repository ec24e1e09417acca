"""An OTLP/HTTP collector for tests: a real HTTP server on loopback that decodes every request
with opentelemetry-proto (the collector's own message types), as a dashboard's collector would.

`OtlpReceiver(refusals=(503, ...))` answers its first POSTs with those statuses (a collector
briefly unwell); the rest are decoded and kept, oldest first. Read what arrived with `spans()`,
`logs()` (each with its resource's attributes) and `metrics()` (Metric messages), or the raw
`requests`; wait with `wait_for(n)` / `wait_until(condition)`. `close()` stops it.
"""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Callable
from typing import Any

WAIT_S = 10.0
"""How long `wait_for` and `wait_until` wait by default."""


def attrs(key_values: Any) -> dict[str, Any]:
    """OTLP `KeyValue`s as a dict of plain values (None for an empty value)."""
    out = {}
    for kv in key_values:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind) if kind else None
    return out


def _message_class(path: str) -> Any:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return {"/v1/traces": trace_service_pb2.ExportTraceServiceRequest,
            "/v1/logs": logs_service_pb2.ExportLogsServiceRequest,
            "/v1/metrics": metrics_service_pb2.ExportMetricsServiceRequest}.get(path)


class OtlpReceiver:
    """Collects decoded OTLP requests posted to /v1/traces, /v1/logs and /v1/metrics."""

    def __init__(self, refusals: tuple[int, ...] = ()) -> None:
        self.requests: list[tuple[str, Any, Any]] = []
        """(path, headers, decoded request) of each POST accepted, oldest first."""
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
                cls = _message_class(self.path)
                if cls is None:
                    status = 404
                if status != 200:
                    receiver.refused += 1
                    self.send_response(status)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                receiver._keep(self.path, self.headers, cls.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _keep(self, path: str, headers: Any, message: Any) -> None:
        with self.got:
            self.requests.append((path, headers, message))
            self.got.notify_all()

    def _of(self, path: str) -> list[Any]:
        with self.got:
            return [request for p, _, request in self.requests if p == path]

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, Span) of every span received, oldest first."""
        return [(attrs(rs.resource.attributes), span) for request in self._of("/v1/traces")
                for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]

    def logs(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, LogRecord) of every log record received, oldest first."""
        return [(attrs(rl.resource.attributes), record) for request in self._of("/v1/logs")
                for rl in request.resource_logs for sl in rl.scope_logs
                for record in sl.log_records]

    def metric_requests(self) -> list[Any]:
        """The metrics requests received, oldest first."""
        return self._of("/v1/metrics")

    def metrics(self) -> list[Any]:
        """Every Metric message received, oldest first."""
        return [metric for request in self._of("/v1/metrics")
                for rm in request.resource_metrics for sm in rm.scope_metrics
                for metric in sm.metrics]

    def wait_for(self, n: int, timeout: float = WAIT_S) -> list[tuple[str, Any, Any]]:
        """Waits until `n` requests were accepted; returns them all."""
        with self.got:
            assert self.got.wait_for(lambda: len(self.requests) >= n, timeout), (
                f"{len(self.requests)} OTLP requests within {timeout:g}s, expected {n}")
            return list(self.requests)

    def wait_until(self, condition: Callable[[], Any], timeout: float = WAIT_S) -> None:
        """Waits until `condition()` (read under the receiver's lock, after each request)
        holds."""
        with self.got:
            assert self.got.wait_for(condition, timeout), "OTLP receiver: not within " \
                f"{timeout:g}s ({len(self.requests)} requests)"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
