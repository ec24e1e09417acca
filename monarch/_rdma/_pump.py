"""Chunked, flow-controlled bulk movement between the two ends of a data connection.

The producer may have at most `window` chunks that the consumer has not yet taken; the consumer
grants one credit per chunk it has taken, except for the last `window` chunks, whose credits the
producer would never wait for (so neither side waits for the other at the end). Two carriers
share that loop:

- `Ring` (one host): chunk i is copied into slot i % slots of a shared segment and announced by
  a 4-byte length on the socket; the credit frees the slot. Producer and consumer copy at the
  same time, each on its own core, and the slots stay in cache.
- `Stream` (across hosts): chunk bytes go on the socket itself, straight from the source memory
  and straight into the destination memory (no staging).

Either side failing (peer gone, deadline passed) ends the transfer with an exception; the
connection is then unusable and is closed by the caller.
"""

from __future__ import annotations

import mmap
import socket
import struct
from collections.abc import Callable

from ._memory import Memory, memmove
from ._proto import Deadline, ProtocolError, recv_exact, recv_into_exact

_U32 = struct.Struct("<I")
CREDIT = _U32.pack(1)


class Ring:
    """A shared segment cut into equal slots, mapped by both ends of a unix connection."""

    def __init__(self, mapping: mmap.mmap, address: int, slots: int, slot_bytes: int) -> None:
        self.mapping = mapping
        self.address = address
        self.slots = slots
        self.chunk = slot_bytes
        self.window = slots

    def put(self, sock: socket.socket, index: int, memory: Memory, offset: int, n: int) -> None:
        memmove(self._slot(index), memory.address + offset, n)
        sock.sendall(_U32.pack(n))

    def take(self, sock: socket.socket, index: int, memory: Memory, offset: int, n: int) -> None:
        (announced,) = _U32.unpack(recv_exact(sock, _U32.size))
        if announced != n:
            raise ProtocolError(f"ring chunk {index} announced {announced} bytes, expected {n}")
        memmove(memory.address + offset, self._slot(index), n)

    def _slot(self, index: int) -> int:
        return self.address + (index % self.slots) * self.chunk

    def close(self) -> None:
        try:
            self.mapping.close()
        except BufferError:  # a view is still exported: the mapping goes with the last one
            pass


class Stream:
    """Chunks carried by the socket itself."""

    def __init__(self, chunk: int, window: int) -> None:
        self.chunk = chunk
        self.window = window

    def put(self, sock: socket.socket, index: int, memory: Memory, offset: int, n: int) -> None:
        sock.sendall(memory.view[offset:offset + n])

    def take(self, sock: socket.socket, index: int, memory: Memory, offset: int, n: int) -> None:
        recv_into_exact(sock, memory.view[offset:offset + n])


Carrier = Ring | Stream
ChunkHook = Callable[[int], None] | None


def send(sock: socket.socket, carrier: Carrier, memory: Memory, nbytes: int,
         deadline: Deadline, on_chunk: ChunkHook = None) -> None:
    """Produces `nbytes` of `memory` (returns once the last chunk is handed over)."""
    offset, index = 0, 0
    while offset < nbytes:
        if index >= carrier.window:  # chunk index - window must have been taken
            _take_credit(deadline.arm(sock))
        n = min(carrier.chunk, nbytes - offset)
        carrier.put(deadline.arm(sock), index, memory, offset, n)
        offset, index = offset + n, index + 1
        if on_chunk is not None:
            on_chunk(index)


def receive(sock: socket.socket, carrier: Carrier, memory: Memory, nbytes: int,
            deadline: Deadline, on_chunk: ChunkHook = None) -> None:
    """Consumes `nbytes` into `memory`, granting the credits the producer will wait for."""
    chunks = -(-nbytes // carrier.chunk)
    offset, index = 0, 0
    while offset < nbytes:
        n = min(carrier.chunk, nbytes - offset)
        carrier.take(deadline.arm(sock), index, memory, offset, n)
        if index + carrier.window < chunks:
            sock.sendall(CREDIT)
        offset, index = offset + n, index + 1
        if on_chunk is not None:
            on_chunk(index)


def _take_credit(sock: socket.socket) -> None:
    (granted,) = _U32.unpack(recv_exact(sock, _U32.size))
    if granted != 1:
        raise ProtocolError(f"bad credit {granted}")
