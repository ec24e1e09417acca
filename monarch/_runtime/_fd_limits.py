"""How many peers a process can hold sockets to: the open-file limit and zmq's socket cap.

The controller keeps one zmq socket to every process it sends to (`_wire._transport.Outbox`),
and each costs descriptors (its connection, its signaler). zmq caps a context at 1,023 sockets
unless told otherwise, and the kernel's soft open-file limit is often 1,024: past ~110 hosts of
8 procs a job would fail on `Too many open files`. A runtime raises the soft limit to the hard
one (as Ray does) and sizes zmq's cap to it, before its first socket.
"""

from __future__ import annotations

import resource

import zmq

DESCRIPTORS_PER_SOCKET = 2
"""A peer's socket: its TCP (or ipc) connection and zmq's signaler for it."""


def raise_open_file_limit() -> int:
    """Raises this process's soft open-file limit to its hard limit; returns the soft limit
    now in force (unchanged where the system refuses)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def size_context(ctx: zmq.Context) -> int:
    """Sets `ctx`'s socket cap to what the open-file limit allows (never below zmq's default,
    never above its build's limit); returns it. Call before the context's first socket."""
    limit = raise_open_file_limit()
    cap = max(ctx.get(zmq.MAX_SOCKETS), min(ctx.get(zmq.SOCKET_LIMIT),
                                            limit // DESCRIPTORS_PER_SOCKET))
    ctx.set(zmq.MAX_SOCKETS, cap)
    return cap
