"""OTLP protobuf encoding of our spans, logs and metrics (opentelemetry-proto, imported lazily).

Records are grouped by the process that made them; each group is one ResourceSpans/ResourceLogs
whose resource carries ``service.name``, the ``OTEL_RESOURCE_ATTRIBUTES`` and the process's tags
(``host.name``, ``process.pid``, ``monarch.proc``, ``monarch.job``, ...). Metrics are the store's
series aggregated over processes (`Store.metrics`), so they have one resource (``service.name``
and the ``OTEL_RESOURCE_ATTRIBUTES``); gauges keep the process as their ``proc`` attribute.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ._prometheus import metric_name
from ._records import LogRecord, MetricPoint, SpanRecord

_RESOURCE_KEYS = {"host": "host.name", "pid": "process.pid"}
_LOG_TAG_KEYS = {"host", "proc", "pid", "job"}  # moved to the resource
_SEVERITY = ((logging.CRITICAL, 21), (logging.ERROR, 17), (logging.WARNING, 13),
             (logging.INFO, 9), (logging.DEBUG, 5))
SCOPE_NAME = "monarch"
_SUMS = {"counter": True, "updown": False}  # kind -> is_monotonic; gauges and histograms aside


def resource_attributes(service_name: str, extra: Mapping[str, str],
                        tags: Mapping[str, Any]) -> dict[str, Any]:
    """The OTLP resource attributes of one process."""
    attributes: dict[str, Any] = {"service.name": service_name, **extra}
    for key, value in tags.items():
        if value is not None:
            attributes[_RESOURCE_KEYS.get(key, "monarch." + key)] = value
    return attributes


def any_value(value: Any) -> Any:
    """Converts a Python value to an OTLP AnyValue."""
    from opentelemetry.proto.common.v1 import common_pb2 as common

    if isinstance(value, bool):
        return common.AnyValue(bool_value=value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return common.AnyValue(int_value=value)
    if isinstance(value, float):
        return common.AnyValue(double_value=value)
    if isinstance(value, (bytes, bytearray)):
        return common.AnyValue(bytes_value=bytes(value))
    if isinstance(value, (list, tuple)):
        return common.AnyValue(array_value=common.ArrayValue(values=map(any_value, value)))
    if isinstance(value, dict):
        return common.AnyValue(kvlist_value=common.KeyValueList(values=key_values(value)))
    return common.AnyValue(string_value=str(value))


def key_values(attributes: Mapping[str, Any]) -> list[Any]:
    """Converts a dict to a list of OTLP KeyValue (None values are left out)."""
    from opentelemetry.proto.common.v1 import common_pb2 as common

    return [common.KeyValue(key=str(k), value=any_value(v))
            for k, v in attributes.items() if v is not None]


def encode_spans(spans: Iterable[SpanRecord], resources: Mapping[str, Mapping[str, Any]],
                 service_name: str = "monarch", extra: Mapping[str, str] | None = None) -> bytes:
    """Returns a serialized ExportTraceServiceRequest holding ``spans``."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as service
    from opentelemetry.proto.common.v1 import common_pb2 as common
    from opentelemetry.proto.resource.v1 import resource_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    groups: dict[str, list[SpanRecord]] = {}
    for span in spans:
        groups.setdefault(span.source, []).append(span)
    request = service.ExportTraceServiceRequest()
    for source, members in groups.items():
        tags = {"proc": source, **resources.get(source, {})}
        attributes = resource_attributes(service_name, extra or {}, tags)
        request.resource_spans.append(trace_pb2.ResourceSpans(
            resource=resource_pb2.Resource(attributes=key_values(attributes)),
            scope_spans=[trace_pb2.ScopeSpans(scope=common.InstrumentationScope(name=SCOPE_NAME),
                                              spans=[_span(s, trace_pb2) for s in members])]))
    return request.SerializeToString()


def _span(span: SpanRecord, trace_pb2: Any) -> Any:
    code = trace_pb2.Status.STATUS_CODE_ERROR if span.outcome == "error" else (
        trace_pb2.Status.STATUS_CODE_UNSET)
    return trace_pb2.Span(
        trace_id=span.trace_id, span_id=span.span_id, parent_span_id=span.parent_span_id or b"",
        name=span.name, kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=span.start_ns, end_time_unix_nano=span.end_ns,
        attributes=key_values({**span.attributes, "monarch.outcome": span.outcome}),
        status=trace_pb2.Status(code=code))


def encode_logs(logs: Iterable[LogRecord], resources: Mapping[str, Mapping[str, Any]],
                service_name: str = "monarch", extra: Mapping[str, str] | None = None) -> bytes:
    """Returns a serialized ExportLogsServiceRequest holding ``logs``."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as service
    from opentelemetry.proto.common.v1 import common_pb2 as common
    from opentelemetry.proto.logs.v1 import logs_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2

    groups: dict[str, list[LogRecord]] = {}
    for log in logs:
        groups.setdefault(str(log.tags.get("proc", "")), []).append(log)
    request = service.ExportLogsServiceRequest()
    for source, members in groups.items():
        tags = {k: v for k, v in members[0].tags.items() if k in _LOG_TAG_KEYS}
        attributes = resource_attributes(
            service_name, extra or {}, {**tags, **resources.get(source, {})})
        request.resource_logs.append(logs_pb2.ResourceLogs(
            resource=resource_pb2.Resource(attributes=key_values(attributes)),
            scope_logs=[logs_pb2.ScopeLogs(scope=common.InstrumentationScope(name=SCOPE_NAME),
                                           log_records=[_log(r, logs_pb2) for r in members])]))
    return request.SerializeToString()


def _log(record: LogRecord, logs_pb2: Any) -> Any:
    attributes = {k: v for k, v in record.tags.items() if k not in _LOG_TAG_KEYS}
    attributes["log.iostream"] = record.stream
    attributes["monarch.hlc"] = record.hlc
    return logs_pb2.LogRecord(
        time_unix_nano=record.wall_ns, observed_time_unix_nano=record.wall_ns,
        severity_number=severity_number(record.level),
        severity_text=logging.getLevelName(record.level), body=any_value(record.text),
        attributes=key_values(attributes), trace_id=record.trace_id or b"",
        span_id=record.span_id or b"")


def severity_number(level: int) -> int:
    """Maps a `logging` level to an OTLP SeverityNumber (0 for NOTSET)."""
    for threshold, number in _SEVERITY:
        if level >= threshold:
            return number + min((level - threshold) // 3, 3)
    return 1 if level > 0 else 0


def encode_metrics(points: Iterable[MetricPoint], service_name: str = "monarch",
                   extra: Mapping[str, str] | None = None, start_ns: int = 0,
                   now_ns: int = 0) -> bytes:
    """Returns a serialized ExportMetricsServiceRequest holding ``points``, cumulative.

    One metric per name, named as Prometheus scrapes it (``monarch_messages_handled``: a
    dashboard reads the same series from either) with one data point per series, its labels as
    attributes. Counters are monotonic sums, ``updown`` ones sums that may fall, histograms keep
    their bounds and (not cumulative) bucket counts. ``start_ns`` is when the sums began (at the
    latest); a point without a time gets ``now_ns``.
    """
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service
    from opentelemetry.proto.common.v1 import common_pb2 as common
    from opentelemetry.proto.metrics.v1 import metrics_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2

    by_name: dict[str, list[MetricPoint]] = {}
    for point in points:
        by_name.setdefault(point.name, []).append(point)
    scope = metrics_pb2.ScopeMetrics(
        scope=common.InstrumentationScope(name=SCOPE_NAME),
        metrics=[_metric(members, start_ns, now_ns, metrics_pb2) for members in by_name.values()])
    resource = resource_pb2.Resource(
        attributes=key_values({"service.name": service_name, **(extra or {})}))
    return service.ExportMetricsServiceRequest(resource_metrics=[
        metrics_pb2.ResourceMetrics(resource=resource, scope_metrics=[scope])]).SerializeToString()


def _metric(points: list[MetricPoint], start_ns: int, now_ns: int, pb: Any) -> Any:
    kind = points[0].kind
    same = [p for p in points if p.kind == kind]  # a name reported with two kinds: the first's
    cumulative = pb.AGGREGATION_TEMPORALITY_CUMULATIVE
    if kind == "histogram":
        data = {"histogram": pb.Histogram(aggregation_temporality=cumulative, data_points=[
            _histogram_point(p, start_ns, now_ns, pb) for p in same])}
    elif kind in _SUMS:
        data = {"sum": pb.Sum(aggregation_temporality=cumulative, is_monotonic=_SUMS[kind],
                              data_points=[_number_point(p, start_ns, now_ns, pb) for p in same])}
    else:
        data = {"gauge": pb.Gauge(data_points=[_number_point(p, 0, now_ns, pb) for p in same])}
    return pb.Metric(name=metric_name(points[0].name), description=points[0].description, **data)


def _number_point(point: MetricPoint, start_ns: int, now_ns: int, pb: Any) -> Any:
    value, time_ns = point.value, point.time_ns or now_ns
    exact = isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    number = {"as_int": value} if exact else {"as_double": float(value)}
    return pb.NumberDataPoint(attributes=key_values(point.labels), time_unix_nano=time_ns,
                              start_time_unix_nano=min(start_ns, time_ns), **number)


def _histogram_point(point: MetricPoint, start_ns: int, now_ns: int, pb: Any) -> Any:
    time_ns = point.time_ns or now_ns
    return pb.HistogramDataPoint(
        attributes=key_values(point.labels), start_time_unix_nano=min(start_ns, time_ns),
        time_unix_nano=time_ns, count=point.count, sum=point.value,
        bucket_counts=point.buckets, explicit_bounds=point.bounds)
