"""Calls to the procs' own system agents (stop an actor mesh, ping it, a proc's stats or
stacks, a workspace's files): one call to a set of procs, answered by each proc's agent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from . import _context, _process_runtime as _process
from ._future import Future
from ._ports import CallInfo, CallSink
from ._recipients import Recipients


def current_runtime() -> Any:
    """This process's runtime, started if it was not (the job starts on first use)."""
    runtime = _process.current()
    if runtime is None:
        _context.root()
        runtime = _process.current()
    return runtime


def _nothing(values: list[Any]) -> None:
    return None


def system_call(to: Recipients, method: str, body: dict[str, Any] | None = None,
                combine: Callable[[list[Any]], Any] = _nothing) -> Future[Any]:
    """Calls system method `method` of the procs' agents `to` (`procs_of`) with `body`: a
    future of `combine(answers)` (answers in rank order; None by default), failed at once
    when a proc of it is known to be dead (never left to hang)."""
    runtime = current_runtime()
    future: Future[Any] = Future._pending()
    addresses = tuple(to.table[r] for r in to.ranks)
    gone = next((runtime.dead[a] for a in addresses if a in runtime.dead), None)
    if gone is not None:
        future.set_exception(RuntimeError(f"a proc of {to.procs} is gone: {gone}"))
        return future
    info = CallInfo(to.mesh, method, lambda i: f"<proc {addresses[i]}>")
    port = runtime.new_port(CallSink(future, addresses, info, combine))
    sender = _context.context().actor_instance._sender
    runtime.cast(sender, to, method, [] if body is None else [msgpack.packb(body)],
                 (runtime.address, port))
    return future
