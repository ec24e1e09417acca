"""The initiator's side of data connections: connect, authenticate, pool, and run one
transfer on a connection over one path.

Connections are pooled per (owner server, transport) and used by one transfer at a time; a
connection whose transfer failed is closed, never pooled again. A unix connection may carry a
ring segment, made on its first shm transfer and kept for the next ones.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from typing import Any

from . import _cma, _config, _pump, _segments
from ._errors import BufferDroppedError, OwnerGoneError, RDMAError
from ._handle import BufferHandle, ServerAddress
from ._memory import Memory
from ._proto import Deadline, client_handshake, recv_msg, send_msg

_PEERCRED = struct.Struct("3i")
MAX_IDLE = 4
"""Idle connections kept per (server, transport); a burst of concurrent transfers opens more."""


class Conn:
    """An authenticated connection to one data server."""

    def __init__(self, sock: socket.socket, transport: str, server: ServerAddress) -> None:
        self.sock = sock
        self.transport = transport
        self.server = server
        self.peer_pid = _peer_pid(sock) if transport == "unix" else None
        self.ring: _pump.Ring | None = None

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        self.sock.close()


def _peer_pid(sock: socket.socket) -> int | None:
    try:
        pid, _, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                     _PEERCRED.size))
    except OSError:
        return None
    return pid or None  # 0: the owner's pid namespace is not visible from here


def connect(server: ServerAddress, transport: str, secret: bytes, deadline: Deadline) -> Conn:
    """Opens and authenticates a connection; raises OwnerGoneError if nobody listens."""
    try:
        if transport == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            deadline.arm(sock).connect(server.unix_name)
        else:
            sock = socket.create_connection((server.tcp_host, server.tcp_port),
                                            timeout=deadline.left())
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (ConnectionRefusedError, FileNotFoundError) as exc:
        raise OwnerGoneError(f"its owner is not serving its buffers any more: it exited or was "
                             f"killed ({exc.strerror})") from None
    try:
        deadline.arm(sock)
        client_handshake(sock, secret)
    except (EOFError, ConnectionError):
        # A server of another job fails on its proof, before any close: this one is dying.
        sock.close()
        raise OwnerGoneError("its owner closed the connection before it was set up: it exited "
                             "or was killed") from None
    except BaseException:
        sock.close()
        raise
    return Conn(sock, transport, server)


class Pool:
    """Idle connections by (server token, transport)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[bytes, str], list[Conn]] = {}

    def take(self, server: ServerAddress, transport: str, secret: bytes,
             deadline: Deadline) -> tuple[Conn, bool]:
        """An idle connection (reused=True) or a new one."""
        with self._lock:
            idle = self._idle.get((server.token, transport))
            if idle:
                return idle.pop(), True
        return connect(server, transport, secret, deadline), False

    def give(self, conn: Conn) -> None:
        """Returns a connection whose last transfer completed cleanly (closes it if enough
        connections to its server are idle already)."""
        with self._lock:
            idle = self._idle.setdefault((conn.server.token, conn.transport), [])
            if len(idle) < MAX_IDLE:
                idle.append(conn)
                return
        conn.close()

    def forget(self, server: ServerAddress) -> None:
        """Closes the idle connections to a server (its owner is gone)."""
        with self._lock:
            conns = [c for key, cs in self._idle.items() if key[0] == server.token for c in cs]
            self._idle = {k: v for k, v in self._idle.items() if k[0] != server.token}
        for conn in conns:
            conn.close()

    def close(self) -> None:
        with self._lock:
            conns = [conn for idle in self._idle.values() for conn in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()


# -- one transfer on one connection ----------------------------------------------------------

def transfer(conn: Conn, handle: BufferHandle, memory: Memory, nbytes: int, op: str,
             path: str, deadline: Deadline, job_id: str) -> str:
    """Reads (`op="read"`) the buffer into `memory` or writes `memory` into it; returns the
    path actually taken (cma falls back to shm when the kernel refuses)."""
    if path == "cma":
        try:
            _cma_transfer(conn, handle, memory, nbytes, op, deadline)
            return "cma"
        except _cma.CmaUnavailable:
            path = "shm"
    if path == "shm" and conn.ring is None:
        _setup_ring(conn, job_id, deadline)
    _request(conn, handle, nbytes, op, path, deadline)
    carrier = conn.ring if path == "shm" else _pump.Stream(_config.TCP_CHUNK_BYTES,
                                                          _config.TCP_WINDOW)
    assert carrier is not None
    if op == "read":
        _pump.receive(conn.sock, carrier, memory, nbytes, deadline)
    else:
        _pump.send(conn.sock, carrier, memory, nbytes, deadline)
        _reply(conn, handle, deadline)
    return path


def drop(conn: Conn, handle: BufferHandle, deadline: Deadline) -> None:
    """Asks the owner to drop the buffer."""
    send_msg(deadline.arm(conn.sock), {"op": "drop", "id": handle.buffer_id,
                                       "token": handle.server.token})
    _reply(conn, handle, deadline)


def _cma_transfer(conn: Conn, handle: BufferHandle, memory: Memory, nbytes: int, op: str,
                  deadline: Deadline) -> None:
    grant = _request(conn, handle, nbytes, op, "cma", deadline)
    assert conn.peer_pid is not None
    try:
        _cma.copy(conn.peer_pid, memory.address, int(grant["address"]), nbytes,
                  write=op == "write", deadline=deadline)
    except _cma.CmaUnavailable:
        send_msg(deadline.arm(conn.sock), {"op": "done", "copied": False, "reply": False})
        raise
    # A read needs no answer: the pin held the memory while we copied. A write waits until
    # the owner has its bytes (a CUDA owner copies them to the device first).
    wait = op == "write"
    send_msg(deadline.arm(conn.sock), {"op": "done", "copied": True, "reply": wait})
    if wait:
        _reply(conn, handle, deadline)


def _request(conn: Conn, handle: BufferHandle, nbytes: int, op: str, path: str,
             deadline: Deadline) -> dict[str, Any]:
    left = deadline.left()
    send_msg(deadline.arm(conn.sock), {"op": op, "path": path, "id": handle.buffer_id,
                                       "token": handle.server.token, "length": nbytes,
                                       "timeout": _config.DEFAULT_TIMEOUT_S if left is None
                                       else left})
    return _reply(conn, handle, deadline)


def _reply(conn: Conn, handle: BufferHandle, deadline: Deadline) -> dict[str, Any]:
    reply = recv_msg(deadline.arm(conn.sock))
    if reply.get("ok"):
        return reply
    kind, text = reply.get("error"), f"{handle.describe()}: {reply.get('message')}"
    if kind == "dropped":
        raise BufferDroppedError(text)
    if kind in ("size", "readonly"):
        raise ValueError(text)
    raise RequestRefused(text)


class RequestRefused(RDMAError):
    """The owner answered a request with an error; the connection stays usable."""


CLEAN_FAILURES = (BufferDroppedError, ValueError, RequestRefused)
"""Errors after which the connection is still in step and may be pooled again."""


def _setup_ring(conn: Conn, job_id: str, deadline: Deadline) -> None:
    slots, slot = _config.RING_SLOTS, _config.RING_SLOT_BYTES
    fd = _segments.create(slots * slot, job_id)
    try:
        mapping, address = _segments.attach(fd, slots * slot)
        conn.ring = _pump.Ring(mapping, address, slots, slot)  # closed with the connection
        send_msg(deadline.arm(conn.sock), {"op": "ring", "slots": slots, "slot": slot})
        _expect_ok(conn, deadline)
        socket.send_fds(conn.sock, [b"F"], [fd])
    finally:
        os.close(fd)
    _expect_ok(conn, deadline)


def _expect_ok(conn: Conn, deadline: Deadline) -> None:
    reply = recv_msg(deadline.arm(conn.sock))
    if not reply.get("ok"):
        raise RDMAError(f"{conn.server.owner} refused a ring: {reply.get('message')}")
