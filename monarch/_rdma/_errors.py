"""The data plane's errors. Each docstring says when it is raised and what to do."""

from __future__ import annotations


class RDMAError(RuntimeError):
    """A transfer of an `RDMABuffer` failed; raised by `.get()` on its future.

    The text names the buffer, its owner and what went wrong (the data server refused the
    connection, the owner broke the protocol, a copy failed). The buffer may still be usable:
    retry, or drop it. Timeouts raise `TimeoutError` instead.
    """


class OwnerGoneError(RDMAError):
    """The process that owns the buffer is gone: it exited or was killed, before or during the
    transfer (the connection was refused or closed, its pid vanished).

    Whatever the destination received is incomplete. The buffer is lost with its owner: make a
    new one in a live process.
    """


class BufferDroppedError(RDMAError):
    """The buffer was dropped (`RDMABuffer.drop()`), or its owner never had it (it restarted).

    Ask the owner for a new buffer.
    """
