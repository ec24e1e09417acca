"""Calls to the procs' system agents on behalf of a mesh: stop an actor mesh, ping it until
every actor ran `__init__` (used by both actor and proc meshes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import config
from .._runtime._agent_calls import current_runtime, system_call
from .._runtime._future import Future
from .._runtime._recipients import Recipients, procs_of

if TYPE_CHECKING:
    from ._actor_mesh import ActorMesh


def _agents(mesh: ActorMesh[Any]) -> Recipients:
    return procs_of(mesh._procs, mesh._table, mesh._view, mesh._ranks)


def stop_actors(mesh: ActorMesh[Any], reason: str) -> Future[None]:
    """Stops the actors of `mesh` (ActorMesh.stop)."""
    runtime = current_runtime()
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
