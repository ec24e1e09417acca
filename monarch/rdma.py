"""Bulk data between processes, apart from actor messages: Monarch's `monarch.rdma`.

    class Trainer(Actor):
        @endpoint
        def weights(self) -> RDMABuffer:
            return RDMABuffer(self.params.view(torch.uint8).flatten())

    buf = trainer.weights.call_one().get()      # a small handle travels, not the bytes
    buf.read_into(local).get()                  # the bytes move on the data plane
    buf.write_from(update).get()
    buf.drop().get()

An `RDMABuffer` is made in the process that owns the memory and passed to others by pickling
(as an endpoint's argument or result). Transfers take the best path this machine has: a copy
straight from the owner's memory on one host (cross-memory attach, or a shared-memory ring
where the kernel does not allow that), a chunked, flow-controlled TCP stream across hosts.
CUDA tensors are staged through host memory. There is no RDMA hardware path (ibverbs) here.

Every transfer is recorded in the job's telemetry (bytes, seconds, source and destination
processes, path), which the console's throughput view and Prometheus show.
"""

from __future__ import annotations

import operator
import warnings
from typing import TYPE_CHECKING, Any

from ._controller import _start as _jobstart
from . import _rdma, config  # noqa: F401 - _jobstart: a controller starts on use
from ._runtime._future import Future, when_all
from ._rdma import BufferDroppedError, OwnerGoneError, RDMAError

if TYPE_CHECKING:
    import torch

    LocalMemory = torch.Tensor | memoryview


class RDMAReadTransferWarning(Warning):
    """Kept for compatibility with Monarch; never emitted here."""


class RDMAWriteTransferWarning(Warning):
    """Kept for compatibility with Monarch; never emitted here."""


class RDMATcpFallbackWarning(Warning):
    """Kept for compatibility with Monarch; never emitted here (TCP is only the cross-host
    path, and one host uses shared memory)."""


def is_ibverbs_available() -> bool:
    """Whether ibverbs RDMA hardware is used: never in this implementation."""
    return False


def is_rdma_available() -> bool:
    """Whether `RDMABuffer` works in this process: always (shared memory on one host, TCP
    across hosts).

    .. deprecated:: as in Monarch, use `get_rdma_backend()` instead.
    """
    warnings.warn("is_rdma_available is deprecated because Monarch now supports multiple RDMA "
                  "backends, making this function ambiguous. Use is_ibverbs_available() or "
                  "get_rdma_backend() instead.", DeprecationWarning, stacklevel=2)
    return True


def get_rdma_backend() -> str:
    """The RDMA backend: ``"tcp"``, Monarch's name for its software transport (here: shared
    memory on one host, TCP across hosts); ``"none"`` once `rdma_allow_tcp_fallback` is off.
    One of ``ibverbs``, ``tcp``, ``none`` in Monarch."""
    return "tcp" if config.get("rdma_allow_tcp_fallback") else "none"


def _validate_timeout(timeout: float) -> float:
    value = float(operator.index(timeout) if isinstance(timeout, int) else timeout)
    if not 0 <= value < 2 ** 64:
        raise OverflowError("timeout must be a non-negative number of seconds")
    return value


class RDMABuffer:
    """A registered span of memory that other processes of the job can read and write."""

    def __init__(self, data: torch.Tensor | memoryview) -> None:
        """Registers `data` with this process's data server.

        Args:
            data: a contiguous torch.Tensor (CPU, or CUDA: staged through host memory), numpy
                array, bytearray, memoryview or other buffer. It stays alive, and registered,
                until `drop()` or the end of this process. Read-only memory (bytes) can be
                read, not written.

        Raises:
            ValueError: `data` is not contiguous, or is empty.
        """
        from ._runtime._context import context

        if not config.get("rdma_allow_tcp_fallback"):
            raise RuntimeError("Tried to create an RDMABuffer, but RDMA is not available on this "
                               "platform: pymonarch has no ibverbs transport, and its software "
                               "data plane is off (rdma_allow_tcp_fallback=False). Call "
                               "monarch.configure(rdma_allow_tcp_fallback=True) before "
                               "creating buffers.")
        ctx = context()  # joins the job (starts it in a fresh controller): the server needs it
        self._handle = _rdma.register(data, ctx.actor_instance.name)

    @classmethod
    def _from_handle(cls, handle: _rdma.BufferHandle) -> RDMABuffer:
        buffer = cls.__new__(cls)
        buffer._handle = handle
        return buffer

    def __reduce__(self) -> Any:
        return RDMABuffer._from_handle, (self._handle,)

    @property
    def backend(self) -> str:
        """The backend in use (see `get_rdma_backend`)."""
        return get_rdma_backend()

    @property
    def owner(self) -> str:
        """The actor (or process, outside actors) that made the buffer."""
        return self._handle.owner_actor

    def size(self) -> int:
        """The buffer's length in bytes."""
        return self._handle.size

    def read_into(self, dst: torch.Tensor | memoryview, *, timeout: int = 60) -> Future[None]:
        """Reads the whole buffer into the start of `dst`.

        Args:
            dst: contiguous, writable memory (tensor, array, bytearray, memoryview) of at least
                `size()` bytes.
            timeout: seconds the whole transfer may take.

        Returns:
            A future settled with None once the bytes are in `dst`. It fails with
            `TimeoutError`, `OwnerGoneError` (the owner exited or was killed, before or during
            the read), `BufferDroppedError`, or `RDMAError`.

        Raises:
            ValueError: `dst` is smaller than the buffer, read-only, or not contiguous.
        """
        return _rdma.read_into(self._handle, dst, _validate_timeout(timeout))

    def write_from(self, src: torch.Tensor | memoryview, *, timeout: int = 60) -> Future[None]:
        """Writes all of `src` to the start of the buffer.

        Args:
            src: contiguous memory of at most `size()` bytes.
            timeout: seconds the whole transfer may take.

        Returns:
            A future settled with None once the owner's memory holds the bytes; it fails like
            `read_into`'s.

        Raises:
            ValueError: `src` is larger than the buffer or not contiguous, or the buffer was
                made over read-only memory.
        """
        return _rdma.write_from(self._handle, src, _validate_timeout(timeout))

    def drop(self) -> Future[None]:
        """Releases the owner's memory (after transfers in progress end). Later transfers fail
        with `BufferDroppedError`. Dropping twice, or after the owner died, is not an error."""
        return _rdma.drop(self._handle)

    def __repr__(self) -> str:
        return f"<{self._handle.describe()}>"


class RDMAAction:
    """A batch of reads and writes submitted as one unit (they run concurrently)."""

    def __init__(self) -> None:
        self._ops: list[tuple[str, RDMABuffer, Any]] = []

    def read_remote(self, dst: LocalMemory, src: RDMABuffer) -> RDMAAction:
        """Queues a read of buffer `src` into local memory `dst`.

        Raises:
            ValueError: now, if `dst` is read-only or smaller than the buffer."""
        _rdma.check_read(src._handle, dst)
        self._ops.append(("read", src, dst))
        return self

    def write_remote(self, dst: RDMABuffer, src: LocalMemory) -> RDMAAction:
        """Queues a write of local memory `src` into buffer `dst`.

        Raises:
            ValueError: now, if `src` is larger than the buffer or the buffer is read-only."""
        _rdma.check_write(dst._handle, src)
        self._ops.append(("write", dst, src))
        return self

    def fetch_add(self, src: RDMABuffer, dst: LocalMemory, add: int) -> RDMAAction:
        """Not supported (as in Monarch 0.7)."""
        raise NotImplementedError("Not yet supported")

    def compare_and_swap(self, src: RDMABuffer, dst: LocalMemory, compare: int,
                         swap: int) -> RDMAAction:
        """Not supported (as in Monarch 0.7)."""
        raise NotImplementedError("Not yet supported")

    def submit(self, *, timeout: int = 60) -> Future[None]:
        """Starts every queued operation; the future settles when all have ended (with the
        first failure, if any).

        Raises:
            ValueError: an operation is invalid (see `read_into`/`write_from`), or two
                operations touch overlapping local memory and one of them writes it.
        """
        seconds = _validate_timeout(timeout)
        _check_races(self._ops)
        futures = [_rdma.read_into(buf._handle, local, seconds) if op == "read"
                   else _rdma.write_from(buf._handle, local, seconds)
                   for op, buf, local in self._ops]
        return when_all(futures, into=_rdma.TransferFuture())


def _check_races(ops: list[tuple[str, RDMABuffer, Any]]) -> None:
    from ._rdma._memory import as_memory

    spans = [(op, as_memory(local, "local memory")) for op, _, local in ops]
    for i, (op_a, a) in enumerate(spans):
        for op_b, b in spans[i + 1:]:
            overlap = a.address < b.address + b.nbytes and b.address < a.address + a.nbytes
            if overlap and a.nbytes and b.nbytes and "read" in (op_a, op_b):
                raise ValueError("two operations of one RDMAAction use overlapping local "
                                 "memory and one of them writes it (a read_remote)")


__all__ = [
    "BufferDroppedError",
    "OwnerGoneError",
    "RDMAAction",
    "RDMABuffer",
    "RDMAError",
    "RDMAReadTransferWarning",
    "RDMATcpFallbackWarning",
    "RDMAWriteTransferWarning",
    "get_rdma_backend",
    "is_ibverbs_available",
    "is_rdma_available",
]
