"""An OTLP/HTTP receiver (opentelemetry-proto, in this test) gets the job's spans, logs and
metrics."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from waiting import wait_until
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from monarch._controller._exporters import start_exporters

pytestmark = pytest.mark.timeout(120)


class Receiver(ThreadingHTTPServer):
    """Collects decoded spans and log records with their resource attributes, and metrics."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[tuple[dict, object]] = []
        self.logs: list[tuple[dict, object]] = []
        self.metrics: list[object] = []  # Metric messages, as they came
        self.lock = threading.Lock()


def attrs(key_values) -> dict:
    out = {}
    for kv in key_values:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") \
            else None
    return out


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            found = [(attrs(rs.resource.attributes), span) for rs in request.resource_spans
                     for ss in rs.scope_spans for span in ss.spans]
            reply = trace_service_pb2.ExportTraceServiceResponse()
            with self.server.lock:
                self.server.spans += found
        elif self.path == "/v1/metrics":
            request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
            found = [metric for rm in request.resource_metrics for sm in rm.scope_metrics
                     for metric in sm.metrics]
            reply = metrics_service_pb2.ExportMetricsServiceResponse()
            with self.server.lock:
                self.server.metrics += found
        else:
            request = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
            found = [(attrs(rl.resource.attributes), record) for rl in request.resource_logs
                     for sl in rl.scope_logs for record in sl.log_records]
            reply = logs_service_pb2.ExportLogsServiceResponse()
            with self.server.lock:
                self.server.logs += found
        data = reply.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def handled_counts(receiver: Receiver, mesh: str) -> list[int]:
    """messages_handled of ``mesh`` as each metrics export carried it, oldest first."""
    with receiver.lock:
        metrics = list(receiver.metrics)
    return [point.as_int for metric in metrics if metric.name == "monarch_messages_handled"
            for point in metric.sum.data_points if attrs(point.attributes)["mesh"] == mesh]


def test_spans_joined_across_processes_and_logs_with_ranks(job, procs, echo_class,
                                                           monkeypatch):
    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, args=(0.2,), daemon=True)
    thread.start()
    host, port = receiver.server_address[:2]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{host}:{port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "monarch-otlp-test")
    exporters = start_exporters(job)  # the job's own wiring, with the variables set
    try:
        assert exporters.otlp is not None
        mesh = procs.spawn("otlpmesh", echo_class)
        mesh.ping.call(7).get(timeout=30)

        def joined():
            with receiver.lock:
                spans = list(receiver.spans)
            calls = {s.span_id: (r, s) for r, s in spans if s.name == "call otlpmesh.ping"}
            return [(calls[s.parent_span_id], (r, s)) for r, s in spans
                    if s.name == "otlpmesh.ping" and s.parent_span_id in calls]

        pairs = wait_until(lambda: len(joined()) == 4 and joined(), "4 joined spans", 60)
        for (call_resource, call), (actor_resource, span) in pairs:
            assert span.trace_id == call.trace_id
            assert call_resource["monarch.proc"] == "controller"
            assert actor_resource["monarch.proc"] != "controller"
            assert actor_resource["process.pid"] != call_resource["process.pid"]
            assert actor_resource["service.name"] == "monarch-otlp-test"
            assert call_resource["monarch.job.id"] == job.job_id
            assert attrs(span.attributes)["mesh"] == "otlpmesh"
        assert sorted(attrs(s.attributes)["rank"] for _, (_, s) in pairs) == [0, 1, 2, 3]

        def echoed():
            with receiver.lock:
                logs = list(receiver.logs)
            return {attrs(r.attributes).get("rank"): (res, r) for res, r in logs
                    if r.body.string_value.startswith("echo 7 from ")}

        lines = wait_until(lambda: len(echoed()) == 4 and echoed(), "4 echoed lines", 60)
        for rank, (resource, record) in lines.items():
            assert record.body.string_value == f"echo 7 from {rank}"
            assert attrs(record.attributes)["mesh"] == "otlpmesh"
            assert resource["process.pid"] > 0 and resource["monarch.proc"] != "controller"
        exporters.close()  # sends the metric series a last time
        assert handled_counts(receiver, "otlpmesh")[-1] == 4
    finally:
        exporters.close()
        receiver.shutdown()
        receiver.server_close()


SHORT_SCRIPT = '''
import logging
from monarch.actor import Actor, context, endpoint, this_host


class Echo(Actor):
    @endpoint
    def ping(self, x):
        rank = context().actor_instance.rank.rank
        print(f"echo {x} from {rank}", flush=True)
        logging.getLogger("echo").warning("warned %s from %s", x, rank)
        return x


procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("short", Echo)
for i in range(5):
    mesh.ping.call(i).get()
procs.stop()
'''


def test_a_short_script_loses_nothing_at_exit(tmp_path):
    """Five calls, `procs.stop()` (not waited on), exit at once: every actor span and log line,
    and the final metrics, reach the collector before the controller exits."""
    import os
    import subprocess
    import sys

    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, args=(0.2,), daemon=True)
    thread.start()
    host, port = receiver.server_address[:2]
    script = tmp_path / "short.py"
    script.write_text(SHORT_SCRIPT)
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{host}:{port}",
               MONARCH_RUN_DIR=str(tmp_path / "run"))
    try:
        done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        with receiver.lock:  # the script has exited: what arrived is all there will be
            spans, logs = list(receiver.spans), list(receiver.logs)
    finally:
        receiver.shutdown()
        receiver.server_close()
    calls = {s.span_id for _, s in spans if s.name == "call short.ping"}
    handled = [s for _, s in spans if s.name == "short.ping"]
    assert len(calls) == 5 and len(handled) == 10
    assert all(s.parent_span_id in calls for s in handled)
    assert handled_counts(receiver, "short")[-1:] == [10]  # sent at exit (60 s between exports)
    texts = sorted(r.body.string_value for _, r in logs)
    assert texts == sorted([f"echo {x} from {r}" for x in range(5) for r in range(2)]
                           + [f"warned {x} from {r}" for x in range(5) for r in range(2)])
