"""Our OTLP/HTTP exporter (`monarch.telemetry.OtlpExporter`) against OpenTelemetry's own
(`opentelemetry-exporter-otlp-proto-http`) on the same records: a minute at most.

    python bench/otlp_exporters.py [--n 20000] [--rounds 3] [--batch 512]

The records are a real `Store`'s: ``--n`` invocation spans and as many log lines (4 procs,
each line in its handler's trace), made by recorders and ingested as the controller ingests
shipments. Each exporter sends them all, ``--batch`` records a POST, to a receiver in a child
process (so that its CPU is not counted) that decodes every request with opentelemetry-proto
and counts what arrived; a run counts only if every record did. OpenTelemetry's exporter is fed
what it takes: SDK `ReadableSpan`s / `ReadableLogRecord`s made from our records with our
mapping (`sdk_spans`, `sdk_logs`; the first batch of each is checked to decode to the very
messages ours sends). Rounds alternate the order of the two; the table shows the median round:
records per second (wall) and CPU seconds (this process: encoding, HTTP, GC) per 10k records.
"""

from __future__ import annotations

import argparse
import http.server
import json
import logging
import multiprocessing
import os
import statistics
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from monarch.telemetry import (
    LogRecord,
    OtlpConfig,
    OtlpExporter,
    Recorder,
    SpanRecord,
    Store,
    begin_invocation,
    end_invocation,
    invocation_site,
    now,
    set_process_recorder,
)
from monarch.telemetry._otlp_encode import (
    _LOG_TAG_KEYS,
    encode_logs,
    encode_spans,
    resource_attributes,
    severity_number,
)

PROCS = 4


def filled_store(n: int) -> Store:
    """A store holding ``n`` invocation spans and ``n`` log lines from `PROCS` procs."""
    store = Store(max_spans=2 * n, max_logs=2 * n)
    for p in range(PROCS):
        recorder = Recorder(max_spans=n, max_logs=n)
        recorder.configure({"host": "host-0", "proc": f"trainer-{p}", "pid": 1000 + p,
                            "job": "bench"})
        set_process_recorder(recorder)
        site = invocation_site("trainer", "Trainer", p, "step")
        for i in range(n // PROCS):
            parent = (os.urandom(16), os.urandom(8))
            end_invocation(begin_invocation(site, parent, 128), "error" if i % 50 == 0 else "ok")
            text = f"step {i} loss={1 / (i + 1):.5f}"
            recorder.add_log((now(), time.time_ns(), "stdout", 20, text,
                              {"mesh": "trainer", "actor_class": "Trainer", "rank": p}, parent))
        while (batch := recorder.drain(4096)) is not None:
            store.ingest(batch)
    set_process_recorder(Recorder())
    return store


# -- the receiver (a child process) --------------------------------------------------------------

def serve(ready: Any) -> None:
    """Runs an OTLP/HTTP receiver on loopback; sends its port through ``ready``."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as traces

    counts = {"spans": 0, "logs": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, for a client that keeps its connection

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                request = traces.ExportTraceServiceRequest.FromString(body)
                counts["spans"] += sum(len(ss.spans) for rs in request.resource_spans
                                       for ss in rs.scope_spans)
                reply = traces.ExportTraceServiceResponse()
            else:
                request = logs.ExportLogsServiceRequest.FromString(body)
                counts["logs"] += sum(len(sl.log_records) for rl in request.resource_logs
                                      for sl in rl.scope_logs)
                reply = logs.ExportLogsServiceResponse()
            self._answer("application/x-protobuf", reply.SerializeToString())

        def do_GET(self) -> None:
            self._answer("application/json", json.dumps(counts).encode())

        def _answer(self, content_type: str, data: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ready.send(server.server_address[1])
    server.serve_forever()


def received(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + "/counts", timeout=10) as response:
        return dict(json.loads(response.read()))


# -- OpenTelemetry's exporter, fed our records ----------------------------------------------------

def sdk_spans(spans: Sequence[SpanRecord], resources: Mapping[str, Mapping[str, Any]],
              service: str, extra: Mapping[str, str]) -> list[Any]:
    """Our spans as the SDK's `ReadableSpan`s (the mapping of `_otlp_encode.encode_spans`)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

    scope = InstrumentationScope("monarch")
    error, unset = Status(StatusCode.ERROR), Status(StatusCode.UNSET)
    by_source: dict[str, Any] = {}
    out = []
    for span in spans:
        resource = by_source.get(span.source)
        if resource is None:
            tags = {"proc": span.source, **resources.get(span.source, {})}
            resource = by_source[span.source] = Resource(resource_attributes(service, extra, tags))
        trace_id = int.from_bytes(span.trace_id)
        parent = None if span.parent_span_id is None else SpanContext(
            trace_id, int.from_bytes(span.parent_span_id), False)
        out.append(ReadableSpan(
            span.name, SpanContext(trace_id, int.from_bytes(span.span_id), False), parent,
            resource, {**span.attributes, "monarch.outcome": span.outcome}, kind=SpanKind.INTERNAL,
            status=error if span.outcome == "error" else unset, start_time=span.start_ns,
            end_time=span.end_ns, instrumentation_scope=scope))
    return out


def sdk_logs(records: Sequence[LogRecord], resources: Mapping[str, Mapping[str, Any]],
             service: str, extra: Mapping[str, str]) -> list[Any]:
    """Our log lines as the SDK's `ReadableLogRecord`s (the mapping of `encode_logs`)."""
    from opentelemetry._logs import LogRecord as ApiLogRecord
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    scope = InstrumentationScope("monarch")
    by_source: dict[str, Any] = {}
    out = []
    for record in records:
        source = str(record.tags.get("proc", ""))
        resource = by_source.get(source)
        if resource is None:
            tags = {k: v for k, v in record.tags.items() if k in _LOG_TAG_KEYS}
            resource = by_source[source] = Resource(
                resource_attributes(service, extra, {**tags, **resources.get(source, {})}))
        attributes = {k: v for k, v in record.tags.items() if k not in _LOG_TAG_KEYS}
        attributes["log.iostream"] = record.stream
        attributes["monarch.hlc"] = record.hlc
        api = ApiLogRecord(  # type: ignore[call-overload]
            timestamp=record.wall_ns, observed_timestamp=record.wall_ns,
            trace_id=int.from_bytes(record.trace_id) if record.trace_id else 0,
            span_id=int.from_bytes(record.span_id) if record.span_id else 0, trace_flags=0,
            severity_text=logging.getLevelName(record.level),
            severity_number=SeverityNumber(severity_number(record.level)), body=record.text,
            attributes=attributes)
        out.append(ReadableLogRecord(api, resource, scope))
    return out


class Library:
    """OpenTelemetry's span and log exporters, configured from our `OtlpConfig`."""

    def __init__(self, store: Store, config: OtlpConfig) -> None:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        compression = Compression.Gzip if config.gzip else Compression.NoCompression
        self._store, self._config = store, config
        self._spans = OTLPSpanExporter(endpoint=config.traces_endpoint,
                                       headers=dict(config.traces_headers),
                                       timeout=config.timeout_s, compression=compression)
        self._logs = OTLPLogExporter(endpoint=config.logs_endpoint,
                                     headers=dict(config.logs_headers),
                                     timeout=config.timeout_s, compression=compression)

    def export_spans(self, spans: list[SpanRecord]) -> bool:
        from opentelemetry.sdk.trace.export import SpanExportResult

        c = self._config
        sdk = sdk_spans(spans, self._store.resources(), c.service_name, c.resource_attributes)
        return self._spans.export(sdk) is SpanExportResult.SUCCESS

    def export_logs(self, logs: list[LogRecord]) -> bool:
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        c = self._config
        sdk = sdk_logs(logs, self._store.resources(), c.service_name, c.resource_attributes)
        return self._logs.export(sdk) is LogRecordExportResult.SUCCESS


def check_same_messages(store: Store, spans: list[SpanRecord], logs: list[LogRecord]) -> None:
    """Both ways of encoding give the same OTLP messages (the SDK adds span flags)."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs as sdk_logs_pb
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_spans_pb
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    resources = store.resources()
    ours = ExportTraceServiceRequest.FromString(encode_spans(spans, resources, "bench", {}))
    theirs = sdk_spans_pb(sdk_spans(spans, resources, "bench", {}))
    for resource_spans in theirs.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                span.ClearField("flags")
    assert ours == theirs, "the SDK's spans differ from ours"
    ours_logs = ExportLogsServiceRequest.FromString(encode_logs(logs, resources, "bench", {}))
    assert ours_logs == sdk_logs_pb(sdk_logs(logs, resources, "bench", {})), "logs differ"


# -- measuring ------------------------------------------------------------------------------------

def measure(export: Callable[[list[Any]], bool], records: list[Any],
            batch: int) -> tuple[float, float]:
    """(wall s, CPU s) to export ``records`` in POSTs of ``batch``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(records), batch):
        assert export(records[i:i + batch]), "an export failed"
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="spans, and as many log lines")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=512, help="records per POST")
    args = parser.parse_args()

    store = filled_store(args.n)
    spans, logs = store.spans(limit=args.n), store.all_logs()
    assert len(spans) == len(logs) == args.n, (len(spans), len(logs))
    check_same_messages(store, spans[:args.batch], logs[:args.batch])

    parent, child = multiprocessing.get_context("spawn").Pipe()
    receiver = multiprocessing.get_context("spawn").Process(target=serve, args=(child,),
                                                            daemon=True)
    receiver.start()
    url = f"http://127.0.0.1:{parent.recv()}"
    config = OtlpConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": url,
                                  "OTEL_SERVICE_NAME": "bench"})
    exporters = {"ours": OtlpExporter(store, config), "opentelemetry": Library(store, config)}
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for round_ in range(args.rounds):
            order = list(exporters) if round_ % 2 == 0 else list(exporters)[::-1]
            for name in order:
                exporter = exporters[name]
                for kind, records, export in (("spans", spans, exporter.export_spans),
                                              ("logs", logs, exporter.export_logs)):
                    before = received(url)[kind]
                    run = measure(export, records, args.batch)
                    assert received(url)[kind] - before == len(records), f"{name} lost {kind}"
                    runs.setdefault((name, kind), []).append(run)
    finally:
        receiver.terminate()
    print(f"{args.n} spans and {args.n} log lines, {args.batch} a POST, median of "
          f"{args.rounds} rounds")
    print(f"{'exporter':15s} {'kind':6s} {'records/s':>10s} {'CPU s/10k':>10s}")
    for (name, kind), measured in runs.items():
        wall = statistics.median(w for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        print(f"{name:15s} {kind:6s} {args.n / wall:10,.0f} {cpu * 10_000 / args.n:10.3f}")


if __name__ == "__main__":
    main()
