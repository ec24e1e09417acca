"""The OpenTelemetry bridge: user spans and metrics through the OTel SDK, into our recorder.

Built on first use (importing OpenTelemetry reads the environment, so nothing here imports it
at module import). Parenting works in both directions:

* A lean span (the invocation) is held in our context variable, not in the OTel context. Our
  TracerProvider hands out tracers whose ``start_span`` picks the parent as the innermost of the
  lean context and the OTel current span (see `_innermost`), so ``span()``, ``@traced`` and any
  ``opentelemetry.trace.get_tracer(...)`` span started inside a handler is the invocation's child.
* ``span()`` sets both the OTel current span and the lean context to itself, and the bridge
  installs `_innermost` as the context probe, so `current_trace_context()` (what the runtime
  puts in envelopes) sees user spans, including ones started with raw OpenTelemetry.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import _context
from ._context import TraceContext
from ._recorder import add_process_collector, process_recorder
from ._records import MetricPoint

USER_METRICS_INTERVAL_S = 1.0
_get_current_span: Any = None  # opentelemetry.trace.get_current_span, once the bridge exists


class Bridge:
    """The process's OTel providers, wired to the process recorder."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        classes = _classes()
        resource = Resource({"service.name": "monarch"})
        self.tracer_provider = classes.Provider(
            sampler=ALWAYS_ON, resource=resource, id_generator=classes.IdGenerator())
        self.tracer_provider.add_span_processor(classes.Processor())
        self.reader = classes.Reader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader], resource=resource)
        self.tracer = self.tracer_provider.get_tracer("monarch")
        self.meter = self.meter_provider.get_meter("monarch")
        self._lock = threading.Lock()
        self._last_collect = 0.0
        self._sent: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # series -> last value shipped
        add_process_collector(self.collect_user_metrics)
        global _get_current_span
        from opentelemetry.trace import get_current_span

        _get_current_span = get_current_span
        _context.otel_probe = _innermost

    def collect_user_metrics(self) -> list[MetricPoint]:
        """Collects `get_meter()` instruments, at most once per USER_METRICS_INTERVAL_S, and
        returns the series that changed since the previous collect."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_collect < USER_METRICS_INTERVAL_S:
                return []
            self._last_collect = now
            self.reader.points = []
            self.reader.collect()
            return [p for p in self.reader.points if self._changed(p)]

    def _changed(self, point: MetricPoint) -> bool:
        key = (point.name, tuple(sorted(point.labels.items())))
        value = (point.value, point.count, point.buckets)
        if self._sent.get(key) == value:
            return False
        self._sent[key] = value
        return True

    def set_global(self) -> None:
        """Makes these providers OpenTelemetry's global ones, unless the user already set some."""
        from opentelemetry import metrics, trace

        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(self.tracer_provider)
        if "Proxy" in type(metrics.get_meter_provider()).__name__:  # none set yet
            metrics.set_meter_provider(self.meter_provider)


_bridge_lock = threading.Lock()
_bridge: Bridge | None = None


def bridge() -> Bridge:
    """Returns the process's bridge, building it on first use."""
    global _bridge
    if _bridge is None:
        with _bridge_lock:
            if _bridge is None:
                _bridge = Bridge()
    return _bridge


def install_otel(set_global: bool = True) -> None:
    """Builds the bridge now and (by default) makes its providers OpenTelemetry's global ones.

    The runtime calls it when a proc starts, so spans from ``opentelemetry.trace.get_tracer()``
    in user code join the invocation's trace. A provider the user set first is left alone.
    """
    built = bridge()
    if set_global:
        built.set_global()


def _ids_of(span: Any) -> TraceContext | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return (ctx.trace_id.to_bytes(16, "big"), ctx.span_id.to_bytes(8, "big"))


def _innermost(lean: TraceContext | None) -> TraceContext | None:
    """The innermost of the lean context and the OTel current span.

    They differ only when a raw OpenTelemetry span is open (our spans set both). A raw span in
    the lean span's trace was started inside it (our tracers parent it there), so it is inner;
    one from another trace is a stale or foreign context and the lean span wins.
    """
    otel = _ids_of(_get_current_span())
    if otel is None:
        return lean
    if lean is None or lean[0] == otel[0]:
        return otel
    return lean


def parent_context(ctx: TraceContext | None) -> Any:
    """An OTel Context whose current span is ``ctx`` (or the empty context for None)."""
    from opentelemetry import trace
    from opentelemetry.context import Context

    if ctx is None:
        return Context()
    span_context = trace.SpanContext(
        int.from_bytes(ctx[0], "big"), int.from_bytes(ctx[1], "big"), is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def _record_span(span: Any) -> None:
    ctx = span.context
    parent = span.parent.span_id.to_bytes(8, "big") if span.parent is not None else None
    attributes = dict(span.attributes or {})
    outcome = "error" if span.status.status_code.name == "ERROR" else "ok"
    if outcome == "error" and span.status.description:
        attributes.setdefault("error", span.status.description)
    process_recorder().add_span((
        ctx.trace_id.to_bytes(16, "big"), ctx.span_id.to_bytes(8, "big"), parent, span.name,
        span.start_time or 0, span.end_time or 0, attributes, outcome))


def _points_of(metrics_data: Any, source: str) -> list[MetricPoint]:
    points: list[MetricPoint] = []
    for resource_metrics in metrics_data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points.extend(_metric_points(metric, source))
    return points


def _metric_points(metric: Any, source: str) -> Iterator[MetricPoint]:
    kind = _kind_of(metric.data)
    for dp in metric.data.data_points:
        labels = {str(k): str(v) for k, v in (dp.attributes or {}).items()}
        if kind == "histogram":
            yield MetricPoint(metric.name, kind, labels, float(dp.sum), dp.time_unix_nano,
                              source, int(dp.count), tuple(dp.explicit_bounds),
                              tuple(dp.bucket_counts), metric.description or "")
        else:
            yield MetricPoint(metric.name, kind, labels, float(dp.value), dp.time_unix_nano,
                              source, description=metric.description or "")


def _kind_of(data: Any) -> str:
    name = type(data).__name__
    if name == "Sum":
        return "counter" if data.is_monotonic else "updown"
    return "histogram" if "Histogram" in name else "gauge"


@functools.cache
def _classes() -> Any:
    """Builds the SDK subclasses (OpenTelemetry is imported only now)."""
    from types import SimpleNamespace

    from opentelemetry import trace
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class IdGenerator(RandomIdGenerator):
        def generate_span_id(self) -> int:
            return int.from_bytes(_context.new_span_id(), "big")

        def generate_trace_id(self) -> int:
            return int.from_bytes(_context.new_trace_id(), "big")

    class Processor(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            tags = _context.current_actor_tags()
            if tags:
                span.set_attributes({k: v for k, v in tags.items() if _is_attr(v)})

        def on_end(self, span: Any) -> None:
            try:
                _record_span(span)
            except Exception:  # ending a user span must never raise into user code
                process_recorder().count_dropped("span")

    class Reader(MetricReader):
        def __init__(self) -> None:
            super().__init__()
            self.points: list[MetricPoint] = []  # what the last collect produced

        def _receive_metrics(self, metrics_data: Any, timeout_millis: float = 10_000,
                             **kwargs: Any) -> None:
            if metrics_data is not None:
                self.points = _points_of(metrics_data, process_recorder().source)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    class Tracer(trace.Tracer):
        """Wraps an SDK tracer so spans started without a context find the lean parent."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def start_span(self, name: str, context: Any = None, *args: Any, **kw: Any) -> Any:
            if context is None:
                context = _effective_context()
            return self._inner.start_span(name, context, *args, **kw)

        @contextmanager  # the API's own decorator is private; same behaviour
        def start_as_current_span(  # type: ignore[override]
                self, name: str, context: Any = None,
                                  kind: Any = trace.SpanKind.INTERNAL, attributes: Any = None,
                                  links: Any = None, start_time: int | None = None,
                                  record_exception: bool = True,
                                  set_status_on_exception: bool = True,
                                  end_on_exit: bool = True) -> Iterator[Any]:
            span = self.start_span(name, context, kind, attributes, links, start_time,
                                   record_exception, set_status_on_exception)
            with trace.use_span(span, end_on_exit=end_on_exit,
                                record_exception=record_exception,
                                set_status_on_exception=set_status_on_exception):
                yield span

    class Provider(TracerProvider):
        def get_tracer(self, *args: Any, **kw: Any) -> Any:
            return Tracer(super().get_tracer(*args, **kw))

    return SimpleNamespace(IdGenerator=IdGenerator, Processor=Processor, Reader=Reader,
                           Tracer=Tracer, Provider=Provider)


def _effective_context() -> Any:
    """The OTel context to start a span in: None (the current one) unless a lean span is inner."""
    from opentelemetry import trace

    lean = _context.lean_trace_context()
    if lean is None:
        return None
    current = _ids_of(trace.get_current_span())
    if current is not None and _innermost(lean) == current:
        return None
    return parent_context(lean)


def _is_attr(value: Any) -> bool:
    return isinstance(value, (str, bool, int, float))
