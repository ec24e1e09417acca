"""Adverbs: how an endpoint sends a call, as data.

`mesh.ep.call(...)`, `.call_one`, `.choose`, `.stream`, `.broadcast` and `send(ep, ..., port=)`
each send one message through the cast tree; they differ only in whom they pick and what comes
back. An `Adverb` says both, and the mesh's send path reads it (`ActorMesh._send`).
"""

from __future__ import annotations

from dataclasses import dataclass

# What comes back to the caller (`Adverb.answers`).
VALUE_MESH = "value mesh"
"""A future of every actor's answer, as a ValueMesh (`call`)."""
ONE_VALUE = "one value"
"""A future of the one actor's answer (`call_one`, `choose`)."""
EACH_VALUE = "each value"
"""A future per actor, in the order the answers arrive (`stream`)."""
NOTHING = "nothing"
"""No future: nothing is collected here (`broadcast`; a send whose answers go to a port)."""


@dataclass(frozen=True, slots=True)
class Adverb:
    """One way to send a call. `name` is what telemetry records for it (a span's adverb)."""

    name: str
    answers: str
    """What comes back: VALUE_MESH, ONE_VALUE, EACH_VALUE or NOTHING."""
    single: bool = False
    """The mesh must hold exactly one actor (`call_one`), else ValueError."""
    picks: Adverb | None = None
    """When set, the call goes to one actor of the mesh picked at random, sent with `picks`."""


CALL = Adverb("call", VALUE_MESH)
CALL_ONE = Adverb("call_one", ONE_VALUE, single=True)
CHOOSE = Adverb("choose", ONE_VALUE, picks=Adverb("one", ONE_VALUE))
STREAM = Adverb("stream", EACH_VALUE)
BROADCAST = Adverb("broadcast", NOTHING)
TO_PORT = {"all": Adverb("port:all", NOTHING),
           "choose": Adverb("port:choose", NOTHING, picks=Adverb("port:one", NOTHING))}
"""`send(endpoint, args, kwargs, port, selection)`: each answer goes to `port`, by selection."""
