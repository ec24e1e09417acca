"""Lean spans: the per-invocation hot path, without the OpenTelemetry SDK.

A `SpanHandle` is a handful of slots; ending it appends one tuple to the process recorder. The
ids are random (our own generator, reseeded after fork), the parent comes from the envelope or
the current context, and while the span is active it is the current trace context, so outgoing
calls, user spans and log lines made inside it join its trace.

The runtime's own spans are cheaper still: `begin_invocation` / `end_invocation` (an actor's
invocation, which also feeds the invocation metrics) and `begin_call` / `end_call` (a caller's
span; `start_site_span` is the same as an object) record a tuple that points at a shared
`SpanSite` (see `monarch.telemetry._sites`). They run once per message on each side of every
call, between two thread wakes, with cold caches: each Python call they make costs there
several times what a micro-benchmark says, so they make few.
"""

from __future__ import annotations

import contextvars
import time
from types import TracebackType
from typing import Any, Self

from . import _context, _recorder
from ._context import TraceContext, new_span_id, new_trace_id
from ._recorder import Recorder, process_recorder
from ._sites import SpanSite, _call_sites, call_site

_time_ns = time.time_ns
_trace_var = _context._trace
_bits = _context._bits

Invocation = tuple[tuple[Any, ...], contextvars.Token[TraceContext | None]]
"""An open invocation span: ((site id, trace_id, span_id, parent_span_id, start_ns, value),
the token that restores the trace context)."""


class SpanHandle:
    """An open lean span; call `end` exactly once (later calls do nothing).

    Also a context manager: leaving it ends the span with outcome ``error`` if an exception
    escaped, ``ok`` otherwise.
    """

    __slots__ = (
        "_recorder",
        "_token",
        "attributes",
        "name",
        "parent_span_id",
        "span_id",
        "start_ns",
        "trace_id",
    )

    def __init__(self, name: str, trace_id: bytes, parent_span_id: bytes | None,
                 attributes: dict[str, Any], recorder: Recorder, activate: bool) -> None:
        self.name = name
        self.trace_id = trace_id
        self.parent_span_id = parent_span_id
        self.span_id = span_id = new_span_id()
        self.attributes = attributes
        self._recorder: Recorder | None = recorder
        self._token: contextvars.Token[TraceContext | None] | None = (
            _trace_var.set((trace_id, span_id)) if activate else None
        )
        self.start_ns = _time_ns()

    @property
    def context(self) -> TraceContext:
        """(trace_id, span_id) to put in an outgoing envelope as the receiver's parent."""
        return (self.trace_id, self.span_id)

    def set_attribute(self, key: str, value: Any) -> None:
        """Adds or replaces one attribute."""
        self.attributes[key] = value

    def end(self, outcome: str = "ok", attributes: dict[str, Any] | None = None) -> None:
        """Finishes the span and hands it to the recorder.

        Args:
            outcome: how it ended: ``ok``, ``error``, ``cancelled``, ...
            attributes: more attributes to add (e.g. bytes out).
        """
        end_ns = _time_ns()
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        if attributes:
            self.attributes.update(attributes)
        recorder.add_span((self.trace_id, self.span_id, self.parent_span_id, self.name,
                           self.start_ns, end_ns, self.attributes, outcome))
        if self._token is not None:
            self._deactivate(self._token)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.end("ok" if exc_type is None else "error")

    def _deactivate(self, token: contextvars.Token[TraceContext | None]) -> None:
        try:
            _trace_var.reset(token)
        except ValueError:  # ended in another context (thread/task): nothing to restore here
            pass


def start_span(name: str, parent: TraceContext | None = None,
               attributes: dict[str, Any] | None = None, *, activate: bool = True,
               recorder: Recorder | None = None) -> SpanHandle:
    """Starts a lean span (≈1-2 µs for start and end together).

    Args:
        name: what runs, e.g. ``Trainer.step`` or ``call Trainer.step``.
        parent: (trace_id, span_id) from the incoming envelope; None means the current trace
            context of this thread/task, and a new trace if there is none.
        attributes: the span's attributes; the handle takes ownership of the dict.
        activate: make the span the current trace context until it ends (for the proc-side
            invocation span). Controller-side call spans pass False: they end on another thread
            and must not become the parent of the caller's next calls.
        recorder: where the span goes; defaults to the process recorder.

    Returns:
        The open span; call ``end(outcome)`` on it.
    """
    if parent is None:
        parent = _context.current_trace_context()
    if parent is None:
        trace_id, parent_span_id = new_trace_id(), None
    else:
        trace_id, parent_span_id = parent
    return SpanHandle(name, trace_id, parent_span_id, {} if attributes is None else attributes,
                      recorder or process_recorder(), activate)


def _ids(parent: TraceContext | None) -> tuple[bytes, bytes | None]:
    if parent is None:
        parent = _context.current_trace_context()
    if parent is None:
        return new_trace_id(), None
    return parent


def begin_invocation(site: SpanSite, parent: TraceContext | None, value: Any = None) -> Invocation:
    """Starts an invocation span and makes it the current trace context (≈0.5 µs).

    Args:
        site: from `invocation_site`.
        parent: (trace_id, span_id) from the envelope; None: the current context or a new trace.
        value: the span's own value (for invocation sites: the message's bytes).

    Returns:
        The open span, for `end_invocation` in the same thread or task.
    """
    trace_id, parent_span_id = _ids(parent) if parent is None else parent
    span_id = (_bits(64) | 1).to_bytes(8)  # new_span_id(), inlined: hot path
    token = _trace_var.set((trace_id, span_id))
    return (site.id, trace_id, span_id, parent_span_id, _time_ns(), value), token


def end_invocation(invocation: Invocation, outcome: str = "ok") -> None:
    """Ends an invocation span: records it (and so its metrics) and restores the trace context.

    Args:
        invocation: from `begin_invocation`; end it once.
        outcome: ``ok``, ``error``, ``cancelled``, ...
    """
    head, token = invocation
    recorder = _recorder._process
    if len(recorder._site_spans) < recorder._max_spans:  # add_site_span, inlined: hot path
        recorder._site_spans.append(head + (_time_ns(), outcome))
    else:
        recorder.add_site_span(head + (_time_ns(), outcome))
    try:
        _trace_var.reset(token)
    except ValueError:  # ended in another context (thread/task): nothing to restore here
        pass


class SiteSpan:
    """An open site span that is not the current context (a caller's span); `end` it once,
    on any thread.

    Attributes:
        context: (trace_id, span_id) to put in an outgoing envelope as the receiver's parent.
    """

    __slots__ = ("_head", "context")

    def __init__(self, site: SpanSite, parent: TraceContext | None = None) -> None:
        trace_id, parent_span_id = _ids(parent)
        span_id = new_span_id()
        self.context: TraceContext = (trace_id, span_id)
        self._head: tuple[Any, ...] | None = (site.id, trace_id, span_id, parent_span_id,
                                              _time_ns(), None)

    def end(self, outcome: str = "ok") -> None:
        """Finishes the span (later calls do nothing)."""
        head, self._head = self._head, None
        if head is not None:
            _recorder._process.add_site_span(head + (_time_ns(), outcome))


CallSpan = tuple[Any, ...]
"""An open caller's span: (site id, trace_id, span_id, parent_span_id, start_ns, None)."""


def begin_call(mesh: str, method: str, adverb: str,
               target: tuple[str, str, str] | None = None) -> CallSpan:
    """Starts the caller's span of one call ``call <mesh>.<method>`` made with ``adverb`` (not
    made current: it ends on another thread). `start_site_span(call_site(...))` without the
    object: the runtime's hot path.

    Returns:
        The open span, for `end_call` once, on any thread; ``span[1:3]`` is its (trace_id,
        span_id), the receiver's parent.
    """
    site = _call_sites.get((mesh, method, adverb, target)) \
        or call_site(mesh, method, adverb, target)
    parent = _trace_var.get()
    if _context.otel_probe is not None:
        parent = _context.otel_probe(parent)
    if parent is None:
        trace_id, parent_span_id = (_bits(128) | 1).to_bytes(16), None
    else:
        trace_id, parent_span_id = parent
    return site.id, trace_id, (_bits(64) | 1).to_bytes(8), parent_span_id, _time_ns(), None


def end_call(span: CallSpan, outcome: str = "ok") -> None:
    """Ends a span from `begin_call` (once): records it."""
    recorder = _recorder._process
    if len(recorder._site_spans) < recorder._max_spans:  # add_site_span, inlined: hot path
        recorder._site_spans.append(span + (_time_ns(), outcome))
    else:
        recorder.add_site_span(span + (_time_ns(), outcome))


def start_site_span(site: SpanSite, parent: TraceContext | None = None) -> SiteSpan:
    """Starts a span of ``site`` that does not become the current context (≈0.6 µs).

    Args:
        site: e.g. from `call_site`.
        parent: the parent's (trace_id, span_id); None: the current context or a new trace.
    """
    return SiteSpan(site, parent)
