"""A process's system agent: the system methods and notices that manage its actors.

Spawning an actor mesh's local actor, stopping it, pinging it (ready once `__init__` ran),
reporting counters, breaking into it at its next message, and handing it failures of meshes it
owns. They run in the loop and only enqueue work for the actors' own threads.
"""

from __future__ import annotations

import os
from typing import Any

import msgpack

from .. import telemetry
from ._slots import FAILED_STATE, STOPPED, AsyncSlot, SpawnHeader, SyncSlot
from ._stacks import actor_stack
from .._runtime._process_runtime import ProcessRuntime
from .._wire import _serial
from .._wire._messages import FAILED, OK, Call


def install(runtime: ProcessRuntime, proc_mesh: Any) -> None:
    """Installs the agent's system methods and notices in a process that hosts actors."""
    runtime.system_methods["spawn"] = spawn_handler(runtime, proc_mesh)
    runtime.system_methods["stop_actors"] = stop_handler(runtime)
    runtime.system_methods["ping"] = ping_handler(runtime)
    runtime.system_methods["stats"] = stats_handler(runtime)
    runtime.system_methods["stacks"] = stacks_handler(runtime)
    runtime.notice_handlers["supervise"] = supervise_handler(runtime)
    runtime.notice_handlers["break_next"] = break_handler(runtime)


def spawn_handler(runtime: ProcessRuntime, proc_mesh: Any) -> Any:
    """The system method `spawn`: creates this process's actor of a new mesh (I/O thread)."""
    def spawn(msg: Call, frames: list[Any]) -> None:
        header = SpawnHeader(msgpack.unpackb(frames[0].buffer, raw=False))
        if runtime.held_spawns is not None and header.owner != runtime.address:
            runtime.held_spawns.append((msg, frames))  # the proc's bootstrap still runs
            return
        view = runtime.view(msg.view)
        cls = AsyncSlot if header.is_async else SyncSlot
        slot = cls(runtime, header, view, msg.lo, frames[1:], proc_mesh)
        slot.requested_ns = telemetry.hlc_wall_ns(msg.hlc)
        slot.start()
        runtime.add_actor(header.mesh, slot)
        runtime.notify(header.controller, "actor_started", {
            "mesh": header.mesh, "name": header.name, "class_name": header.class_name,
            "owner": header.owner, "owner_id": header.owner_id, "procs": msg.procs,
            "rank": slot.rank.rank, "proc": runtime.identity.name, "label": slot.label(),
            "coords": dict(slot.rank), "labels": list(slot.rank.extent.labels),
            "sizes": list(slot.rank.extent.sizes)})

    return spawn


def stop_handler(runtime: ProcessRuntime) -> Any:
    """The system method `stop_actors`: stops this process's actor of a mesh (I/O thread)."""
    def stop(msg: Call, frames: list[Any]) -> None:
        body = msgpack.unpackb(frames[0].buffer, raw=False)
        slot = runtime.actors.get(body["mesh"])
        if slot is None:
            if msg.port is not None:
                runtime.reply(msg.port, msg.lo, OK)
            return
        if slot.state in (FAILED_STATE, STOPPED):
            if msg.port is not None:
                runtime.reply(msg.port, msg.lo, OK)
            return
        slot.request_stop(body.get("reason", "actor was stopped"), msg.port)

    return stop


def ping_handler(runtime: ProcessRuntime) -> Any:
    """The system method `ping`: answers once the proc (or one of its actors) is ready."""
    def ping(msg: Call, frames: list[Any], tries: int = 0) -> None:
        body = msgpack.unpackb(frames[0].buffer, raw=False) if frames else {}
        mesh = body.get("mesh")
        if mesh is None:
            if msg.port is not None:
                runtime.reply(msg.port, msg.lo, OK)
            return
        slot = runtime.actors.get(mesh)
        if slot is not None:
            slot.enqueue_ping((msg.port, msg.lo))
        elif runtime.held_spawns is not None or tries < runtime.spawn_wait_s * 100:
            # the spawn may be on its way, or held until the proc's bootstrap returned
            runtime.call_later(0.01, lambda: ping(msg, frames, tries + 1))
        elif msg.port is not None:
            data, _ = _serial.dumps(f"no actor of mesh {mesh} was spawned on this proc")
            runtime.reply(msg.port, msg.lo, FAILED, [data])

    return ping


def stats_handler(runtime: ProcessRuntime) -> Any:
    """The system method `stats`: this process's counters (inbox refusals, actors, queues) and
    whether its I/O thread sleeps (no parked baton to watch, see `_leader`)."""
    def stats(msg: Call, frames: list[Any]) -> None:
        if msg.port is None:
            return
        inbox = runtime.inbox.stats
        body = {"received": inbox.received, "bad_frames": inbox.bad_frames,
                "denied_peers": inbox.denied_peers,
                "failed_handshakes": inbox.failed_handshakes,
                "internal_errors": runtime.internal_errors, "pid": os.getpid(),
                "duplicates": runtime.reorder.duplicates,
                "overflow": runtime.reorder.overflow,
                "io_asleep": runtime.leadership.io_asleep,
                "telemetry_look_s": getattr(runtime.telemetry_looks, "wait", None),
                "actors": {mesh: {"state": slot.state, "handled": slot.handled,
                                  "queued": slot.queue_depth()}
                           for mesh, slot in runtime.actors.items()}}
        data, _ = _serial.dumps(body)
        runtime.reply(msg.port, msg.lo, OK, [data])

    return stats


def stacks_handler(runtime: ProcessRuntime) -> Any:
    """The system method `stacks`: what this process's actor of `mesh` runs now (its state,
    running handlers and the user frames of its thread), answered from the I/O thread, so an
    actor stuck in a handler is seen where it is stuck."""
    def stacks(msg: Call, frames: list[Any]) -> None:
        if msg.port is None:
            return
        body = msgpack.unpackb(frames[0].buffer, raw=False) if frames else {}
        slot = runtime.actors.get(str(body.get("mesh")))
        answer: dict[str, Any] = {"proc": runtime.identity.name, "pid": os.getpid()}
        if slot is None:
            answer["error"] = "no actor of this mesh runs on this proc"
        else:
            answer.update(actor_stack(slot))
        data, _ = _serial.dumps(answer)
        runtime.reply(msg.port, msg.lo, OK, [data])

    return stacks


def break_handler(runtime: ProcessRuntime) -> Any:
    """The notice `break_next`: the actor of `mesh` stops in pdb at its next message."""
    def break_next(body: dict[str, Any]) -> None:
        slot = runtime.actors.get(body["mesh"])
        if slot is not None:
            slot.break_next = True

    return break_next


def supervise_handler(runtime: ProcessRuntime) -> Any:
    """The notice `supervise`: hands a failure to the owning actor's `__supervise__`."""
    def supervise(failure: dict[str, Any]) -> None:
        for slot in runtime.actors.values():
            if slot.instance.actor_id == failure["owner_id"]:
                slot.supervise_later(failure)
                return

    return supervise
