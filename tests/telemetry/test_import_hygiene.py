"""Importing monarch.telemetry starts no thread, opens no socket, reads no environment, and it
imports nothing of monarch. Also pins the public API."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from monarch import telemetry

PACKAGE = Path(telemetry.__file__).parent

SPY = r"""
import os, socket, sys, threading, pkgutil, importlib
import monarch  # the parent package is not ours to police here
seen = []
environ_type = type(os.environ)
for name in ("__getitem__", "get", "__contains__", "__iter__", "keys", "items", "copy"):
    original = getattr(environ_type, name)
    def spy(self, *args, _name=name, _original=original):
        seen.append(("environ." + _name, args[:1]))
        return _original(self, *args)
    setattr(environ_type, name, spy)
_getenv = os.getenv
os.getenv = lambda *a: (seen.append(("getenv", a[:1])), _getenv(*a))[1]
_start = threading.Thread.start
threading.Thread.start = lambda self: (seen.append(("thread", self.name)), _start(self))[1]
_socket_init = socket.socket.__init__
def socket_spy(self, *a, **k):
    seen.append(("socket", a))
    _socket_init(self, *a, **k)
socket.socket.__init__ = socket_spy
import monarch.telemetry as t
for info in pkgutil.iter_modules(t.__path__):
    importlib.import_module("monarch.telemetry." + info.name)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in
               ("opentelemetry", "msgpack", "prometheus_client", "google"))
print(repr((seen, heavy)))
"""


def test_import_reads_no_environment_and_starts_nothing() -> None:
    out = subprocess.run([sys.executable, "-c", SPY], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    seen, heavy = eval(out)  # our own repr() output
    assert seen == [] and heavy == []


def test_no_module_imports_monarch() -> None:
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1, f"{path.name} imports above its package"
                assert node.level == 1 or not (node.module or "").startswith("monarch"), path
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("monarch") for a in node.names), path.name


def test_files_stay_small() -> None:
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


def test_public_api_is_pinned() -> None:
    assert sorted(telemetry.__all__) == sorted([
        "BATCH_VERSION", "Batch", "BatchError", "Capture", "ExporterStatistics", "FailureRecord",
        "FoldedLine", "HybridClock", "LogRecord", "LoggingCapture", "MetricPoint",
        "ActorStatus", "MeshEvent", "MessageRecord", "RunningHandler", "StatusEvent",
        "MetricsServer", "OtlpConfig", "OtlpExporter", "Rate", "Recorder", "RecorderStatistics",
        "SiteSpan", "Span", "SpanHandle", "SpanSite",
        "SpanRecord", "Store", "StoreCollector", "StoreStatistics", "StreamTee", "Subscription",
        "TraceContext", "TransferRecord", "TransferSummary", "begin_call", "begin_invocation",
        "call_site", "end_call",
        "chrome_trace", "compress_ranks",
        "configure", "current_actor_tags",
        "current_trace_context", "decode_batch", "encode_batch", "end_invocation", "fold",
        "get_meter",
        "get_tracer", "hlc_counter", "hlc_wall_ns", "install_capture", "install_otel",
        "invocation_site", "message_group", "now",
        "observe", "process_recorder",
        "record_transfer", "reset_actor_tags", "reset_trace_context", "serve_metrics",
        "set_actor_tags", "set_process_recorder", "set_queue_depth", "set_trace_context",
        "source_label", "span",
        "start_site_span", "start_span", "traced", "write_chrome_trace"])
    assert all(hasattr(telemetry, name) for name in telemetry.__all__)


def test_no_http_client_until_an_exporter_sends() -> None:
    # Every proc imports telemetry: urllib.request (http.client, email) is ~15 ms of its start.
    code = ("import sys, monarch.telemetry; "
            "print(sorted(m for m in ('urllib.request', 'http.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"
