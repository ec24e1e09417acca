"""What the current thread or task is doing: its trace context and its actor tags.

Both live in context variables, so every thread and every asyncio task sees its own. The runtime
sets them around each handler; telemetry reads them to parent spans and tag log lines.
"""

from __future__ import annotations

import contextvars
import os
import random
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

TraceContext = tuple[bytes, bytes]
"""(trace_id: 16 bytes, span_id: 8 bytes) of the active span."""

_trace: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "monarch_telemetry_trace", default=None
)
_tags: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "monarch_telemetry_actor_tags", default=MappingProxyType({})
)

# Our own generator: user code often seeds `random` identically on every rank, which would make
# the module-level generator hand out the same span ids in every process.
_rng = random.Random()
os.register_at_fork(after_in_child=_rng.seed)
_bits = _rng.getrandbits

# Set by the OpenTelemetry bridge once it is in use: returns the innermost of the lean context
# and the OpenTelemetry current span (see _otel.py). None keeps the hot path free of OTel.
otel_probe: Callable[[TraceContext | None], TraceContext | None] | None = None


def new_trace_id() -> bytes:
    """Returns a random, non-zero 16-byte trace id."""
    return (_bits(128) | 1).to_bytes(16)  # big-endian


def new_span_id() -> bytes:
    """Returns a random, non-zero 8-byte span id."""
    return (_bits(64) | 1).to_bytes(8)  # big-endian


def current_trace_context() -> TraceContext | None:
    """Returns (trace_id, span_id) of the innermost active span, or None.

    The runtime puts it in outgoing envelopes so the receiver's invocation span joins the trace.
    """
    lean = _trace.get()
    probe = otel_probe
    return lean if probe is None else probe(lean)


def lean_trace_context() -> TraceContext | None:
    """Returns the context set by lean spans and `span()` only, ignoring raw OpenTelemetry."""
    return _trace.get()


def set_trace_context(ctx: TraceContext | None) -> contextvars.Token[TraceContext | None]:
    """Makes ``ctx`` the current trace context; returns a token for `reset_trace_context`."""
    return _trace.set(ctx)


def reset_trace_context(token: contextvars.Token[TraceContext | None]) -> None:
    """Restores the trace context a `set_trace_context` call replaced."""
    _trace.reset(token)


def set_actor_tags(**tags: Any) -> contextvars.Token[Mapping[str, Any]]:
    """Tags what runs next in this thread/task (log lines, spans) with mesh, actor_class, rank...

    The runtime calls it when a handler starts and `reset_actor_tags` when it ends. The dict is
    shared by every record made meanwhile, so it is never mutated, only replaced.

    Returns:
        A token for `reset_actor_tags`.
    """
    return _tags.set(tags)


def reset_actor_tags(token: contextvars.Token[Mapping[str, Any]]) -> None:
    """Restores the tags a `set_actor_tags` call replaced."""
    _tags.reset(token)


def current_actor_tags() -> Mapping[str, Any]:
    """Returns the current actor tags."""
    return _tags.get()
