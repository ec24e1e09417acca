"""Calls to the procs' system agents on behalf of a mesh: stop an actor mesh, ping it until
every actor ran `__init__` (used by both actor and proc meshes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack

from .. import config
from .._runtime import _context, _process_runtime as _process
from .._runtime._future import Future
from .._runtime._ports import CallInfo, CallSink
from .._runtime._recipients import procs_of
from .._geometry._view import View

if TYPE_CHECKING:
    from ._actor_mesh import ActorMesh


def _runtime() -> Any:
    _context.root()
    return _process.current()


def _system_call(procs: str, table: tuple[str, ...], view: View, ranks: list[int], method: str,
                 body: dict[str, Any]) -> Future[None]:
    runtime = _process.current() or _runtime()
    future: Future[Any] = Future._pending()
    addresses = tuple(table[r] for r in ranks)
    gone = next((runtime.dead[a] for a in addresses if a in runtime.dead), None)
    if gone is not None:  # a proc of the call is known to be dead: fail now, never hang
        future.set_exception(RuntimeError(f"a proc of {procs} is gone: {gone}"))
        return future
    info = CallInfo(f"@{procs}", method, lambda i: f"<proc {addresses[i]}>")
    port = runtime.new_port(CallSink(future, addresses, info, lambda values: None))
    sender = _context.context().actor_instance._sender
    runtime.cast(sender, procs_of(procs, table, view, ranks), method, [msgpack.packb(body)],
                 (runtime.address, port))
    return future


def stop_actors(mesh: ActorMesh[Any], reason: str) -> Future[None]:
    """Stops the actors of `mesh` (ActorMesh.stop)."""
    runtime = _process.current() or _runtime()
    done = _system_call(mesh._procs, mesh._table, mesh._view, mesh._ranks, "stop_actors",
                        {"mesh": mesh._mesh_id, "reason": reason})

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
    return _system_call(mesh._procs, mesh._table, mesh._view, mesh._ranks, "ping",
                        {"mesh": mesh._mesh_id})
