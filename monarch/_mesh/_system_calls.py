"""Calls to the procs' system agents on behalf of a mesh: stop an actor mesh, ping it until
every actor ran `__init__` (used by both actor and proc meshes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from .. import config
from .._runtime import _context, _process_runtime as _process
from .._runtime._future import Future
from .._runtime._ports import CallInfo, CallSink
from .._runtime._recipients import Recipients, procs_of

if TYPE_CHECKING:
    from ._actor_mesh import ActorMesh


def _runtime() -> Any:
    _context.root()
    return _process.current()


def _nothing(values: list[Any]) -> None:
    return None


def system_call(to: Recipients, method: str, body: dict[str, Any] | None = None,
                combine: Callable[[list[Any]], Any] = _nothing) -> Future[Any]:
    """Calls system method `method` of the procs' agents `to` (`procs_of`) with `body`: a
    future of `combine(answers)` (answers in rank order; None by default), failed at once
    when a proc of it is known to be dead (never left to hang)."""
    runtime = _process.current() or _runtime()
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


def _agents(mesh: ActorMesh[Any]) -> Recipients:
    return procs_of(mesh._procs, mesh._table, mesh._view, mesh._ranks)


def stop_actors(mesh: ActorMesh[Any], reason: str) -> Future[None]:
    """Stops the actors of `mesh` (ActorMesh.stop)."""
    runtime = _process.current() or _runtime()
    done = system_call(_agents(mesh), "stop_actors", {"mesh": mesh._mesh_id, "reason": reason})

    def remember() -> None:
        for i, rank in enumerate(mesh._ranks):
            runtime.failed_actors.setdefault((mesh._mesh_id, rank), mesh._report(i, reason))

    done.add_done_callback(remember)
    # An actor stuck in a handler never answers: after stop_actor_timeout it counts as stopped
    # (it takes no more messages; ProcMesh.stop() ends its process).
    runtime.call_later(config.seconds("stop_actor_timeout"), lambda: done.set_result(None))
    return done


def ping_actors(mesh: ActorMesh[Any]) -> Future[None]:
    """A future settled once each actor of `mesh` has finished `__init__` (ActorMesh.initialized)."""
    return system_call(_agents(mesh), "ping", {"mesh": mesh._mesh_id})
