"""Telemetry: records, clock, recorder, user API, store and exporters.

Imports nothing of ``monarch``; importing it starts no thread, opens no socket and reads no
environment variable (OpenTelemetry, msgpack, protobuf and prometheus_client are imported on
first use, since importing them reads the environment).

In every process (the runtime's side): `configure`, `begin_invocation` / `end_invocation` (with
an `invocation_site`) around each handler, `begin_call` / `end_call` around each
call, `current_trace_context` / `set_actor_tags`, `now` / `observe` for the clock, the metric
hooks, `install_capture`, and `process_recorder().drain()` to ship a batch. In the controller: a
`Store` that ingests the batches, `fold` for the log view, and the exporters (`OtlpExporter`,
`serve_metrics`, `write_chrome_trace`). For users: `span`, `traced`, `get_meter`.
"""

from ._aggregate import Rate, TransferSummary
from ._api import Span, get_meter, get_tracer, span, traced
from ._batch import BATCH_VERSION, Batch, BatchError, decode_batch, encode_batch
from ._capture import Capture, LoggingCapture, StreamTee, install_capture
from ._context import (
    TraceContext, current_actor_tags, current_trace_context, reset_actor_tags,
    reset_trace_context, set_actor_tags, set_trace_context,
)
from ._actors import message_group
from ._fold import FoldedLine, compress_ranks, fold, source_label
from ._hlc import HybridClock, hlc_counter, hlc_wall_ns, now, observe
from ._hooks import record_transfer, set_queue_depth
from ._otel import install_otel
from ._otlp import ExporterStatistics, OtlpConfig, OtlpExporter
from ._perfetto import chrome_trace, write_chrome_trace
from ._prometheus import MetricsServer, StoreCollector, serve_metrics
from ._recorder import (
    Recorder, RecorderStatistics, configure, process_recorder, set_process_recorder,
)
from ._records import (
    ActorStatus, FailureRecord, LogRecord, MessageRecord, MetricPoint, RunningHandler, SpanRecord,
    StatusEvent, TransferRecord,
)
from ._meshbook import MeshEvent
from ._sites import SpanSite, call_site, invocation_site
from ._spans import (
    SiteSpan, SpanHandle, begin_call, begin_invocation, end_call, end_invocation, start_site_span,
    start_span,
)
from ._store import Store, StoreStatistics
from ._subscribe import Subscription

__all__ = [
    "ActorStatus",
    "BATCH_VERSION",
    "Batch",
    "BatchError",
    "Capture",
    "ExporterStatistics",
    "FailureRecord",
    "FoldedLine",
    "HybridClock",
    "LogRecord",
    "MeshEvent",
    "LoggingCapture",
    "MessageRecord",
    "MetricPoint",
    "MetricsServer",
    "OtlpConfig",
    "OtlpExporter",
    "Rate",
    "Recorder",
    "RunningHandler",
    "RecorderStatistics",
    "SiteSpan",
    "Span",
    "SpanHandle",
    "SpanRecord",
    "SpanSite",
    "Store",
    "StoreCollector",
    "StatusEvent",
    "StoreStatistics",
    "StreamTee",
    "Subscription",
    "TraceContext",
    "TransferRecord",
    "TransferSummary",
    "begin_call",
    "begin_invocation",
    "call_site",
    "chrome_trace",
    "compress_ranks",
    "source_label",
    "configure",
    "current_actor_tags",
    "current_trace_context",
    "decode_batch",
    "encode_batch",
    "end_call",
    "end_invocation",
    "fold",
    "get_meter",
    "get_tracer",
    "hlc_counter",
    "hlc_wall_ns",
    "install_capture",
    "install_otel",
    "invocation_site",
    "message_group",
    "now",
    "observe",
    "process_recorder",
    "record_transfer",
    "reset_actor_tags",
    "reset_trace_context",
    "serve_metrics",
    "set_actor_tags",
    "set_process_recorder",
    "set_queue_depth",
    "set_trace_context",
    "span",
    "start_site_span",
    "start_span",
    "traced",
    "write_chrome_trace",
]
