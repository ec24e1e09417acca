"""Importing monarch.telemetry starts no thread, opens no socket, reads no environment, and it
imports nothing of monarch. Also pins the public API."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

from importing import what_importing_does

from monarch import telemetry

PACKAGE = Path(telemetry.__file__).parent


def test_import_reads_no_environment_and_starts_nothing() -> None:
    every = ["monarch.telemetry"] + [f"monarch.telemetry.{info.name}"
                                     for info in pkgutil.iter_modules(telemetry.__path__)]
    done = what_importing_does(*every, first=["monarch"])  # the parent package is not ours
    assert (done.threads, done.sockets, done.environment) == ([], [], [])
    heavy = {"opentelemetry", "msgpack", "prometheus_client", "google"}
    assert heavy.isdisjoint(done.loaded)


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
