"""The user API, with Monarch's names: `span`, `traced`, `get_meter` (and `get_tracer`).

User spans go through the OpenTelemetry SDK, so they are real OTel spans (``with span("x") as s:
s.set_attribute(...)``, ``opentelemetry.trace.get_current_span()`` sees them), parented under the
current invocation span and recorded by the process recorder like every other span.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from . import _context

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.trace import Tracer

_P = ParamSpec("_P")
_R = TypeVar("_R")


class Span:
    """A user span: a context manager, and a decorator that opens one per call.

    Entering starts an OpenTelemetry span (child of the innermost active span) and makes it
    current for OpenTelemetry and for Monarch's trace context; leaving ends it, recording an
    escaping exception and marking the span as an error.
    """

    __slots__ = ("_otel_span", "_tokens", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._otel_span: Any = None
        self._tokens: tuple[Any, contextvars.Token[Any]] | None = None

    def __enter__(self) -> Any:
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        from ._otel import bridge

        span = bridge().tracer.start_span(self.name)
        otel_token = otel_context.attach(trace.set_span_in_context(span))
        ids = span.get_span_context()
        lean_token = _context.set_trace_context(
            (ids.trace_id.to_bytes(16, "big"), ids.span_id.to_bytes(8, "big")))
        self._otel_span, self._tokens = span, (otel_token, lean_token)
        return span

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry.trace import Status, StatusCode

        span, tokens = self._otel_span, self._tokens
        self._otel_span = self._tokens = None
        if span is None or tokens is None:
            return
        if exc is not None:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()
        _restore(lambda: _context.reset_trace_context(tokens[1]))
        _restore(lambda: otel_context.detach(tokens[0]))

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        """Decorates ``fn`` so that every call runs in a new span of this name."""
        return _wrap(fn, self.name)


def _restore(undo: Callable[[], None]) -> None:
    try:
        undo()
    except ValueError:  # exited in another context than entered: nothing to restore
        pass


def span(name: str) -> Span:
    """Returns a span named ``name``: use it as ``with span("load"):`` or ``@span("load")``.

    As in Monarch, the span is tied to the current actor context (it is a child of the running
    endpoint invocation and carries its mesh/rank tags).
    """
    return Span(name)


@overload
def traced(fn: Callable[_P, _R]) -> Callable[_P, _R]: ...


@overload
def traced(*, name: str | None = None) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def traced(fn: Callable[_P, _R] | None = None, *, name: str | None = None
           ) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorator that runs each call of a sync or async function in a span.

    Usage: ``@traced`` or ``@traced(name="custom")``; the span name defaults to the function's
    ``__name__``.
    """

    def decorator(f: Callable[_P, _R]) -> Callable[_P, _R]:
        return _wrap(f, name if name is not None else f.__name__)

    return decorator(fn) if fn is not None else decorator


def _wrap(fn: Callable[_P, _R], name: str) -> Callable[_P, _R]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: _P.args, **kwargs: _P.kwargs) -> Any:
            with Span(name):
                return await fn(*args, **kwargs)  # type: ignore[misc]

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def sync_wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with Span(name):
            return fn(*args, **kwargs)

    return sync_wrapper


def get_meter() -> Meter:
    """Returns Monarch's process-global OpenTelemetry meter.

    Its instruments are collected into this process's telemetry and shipped to the controller
    (then to Prometheus ``/metrics`` as ``monarch_<name>``).
    """
    from ._otel import bridge

    meter: Meter = bridge().meter
    return meter


def get_tracer() -> Tracer:
    """Returns Monarch's OpenTelemetry tracer (its spans parent under invocation spans)."""
    from ._otel import bridge

    tracer: Tracer = bridge().tracer
    return tracer
