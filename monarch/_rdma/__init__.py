"""The data plane behind `monarch.rdma` (private; see docs/DESIGN.md, "Data plane").

Modules: `_memory` (user objects as flat host bytes, CUDA staging), `_registry` (owned buffers
and pins), `_server` (per-process data server), `_client` (connections, one transfer on one
connection), `_pump` (chunked flow control: shared ring, TCP stream), `_cma` (cross-memory
attach), `_segments` (ring segments, /dev/shm sweeping), `_proto` (handshake and framing),
`_transfer` (paths, futures, telemetry), `_config` (knobs).
"""

from __future__ import annotations

from ._config import configure, reset
from ._errors import BufferDroppedError, OwnerGoneError, RDMAError
from ._handle import BufferHandle, ServerAddress
from ._segments import leftovers, sweep_job
from ._transfer import (
    TransferFuture, check_read, check_write, choose_path, drop, read_into, register, statistics,
    write_from,
)

__all__ = [
    "BufferDroppedError", "BufferHandle", "OwnerGoneError", "RDMAError", "ServerAddress",
    "TransferFuture", "check_read", "check_write", "choose_path", "configure", "drop", "leftovers", "read_into", "register",
    "reset", "statistics", "sweep_job", "write_from",
]
