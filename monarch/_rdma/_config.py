"""Data-plane knobs. Read when a transfer starts, never at import.

`MONARCH_RDMA_TRANSPORT` (or `configure(transport=...)` in a process) picks the path:
``auto`` (default: in-process copy, else cross-memory attach on one host, else the shared-memory
ring, else TCP), ``cma``/``shm`` (one host: that path, TCP across hosts) and ``tcp`` (always the
cross-host TCP path, even on one host: how tests exercise it here).
`MONARCH_RDMA_SEGMENTS` picks how ring segments are made: ``memfd`` (default, never in /dev/shm)
or ``devshm`` (a /dev/shm file named after the job, unlinked once mapped).
"""

from __future__ import annotations

import os

TRANSPORTS = ("auto", "cma", "shm", "tcp")
SEGMENT_KINDS = ("memfd", "devshm")

RING_SLOT_BYTES = 1 << 20
"""One ring slot. 8 slots of 1 MiB stay in cache while both sides copy (measured best)."""
RING_SLOTS = 8
TCP_CHUNK_BYTES = 1 << 20
TCP_WINDOW = 8
"""Chunks a TCP sender may have in flight before the receiver grants more."""
CMA_CHUNK_BYTES = 16 << 20
"""process_vm_readv/writev span per call; deadlines are checked between spans."""
HANDSHAKE_TIMEOUT_S = 5.0
"""How long a data server waits for a new connection to prove the job secret."""
SERVE_GRACE_S = 5.0
"""A data server gives a transfer the initiator's timeout plus this, then drops the peer."""
DEFAULT_TIMEOUT_S = 60.0

_overrides: dict[str, str] = {}


def configure(*, transport: str | None = None, segments: str | None = None) -> None:
    """Overrides the environment for this process (None leaves a knob as it is)."""
    if transport is not None:
        _check(transport, TRANSPORTS, "transport")
        _overrides["transport"] = transport
    if segments is not None:
        _check(segments, SEGMENT_KINDS, "segments")
        _overrides["segments"] = segments


def reset() -> None:
    """Forgets `configure` overrides."""
    _overrides.clear()


def transport() -> str:
    """The path knob: one of `TRANSPORTS`."""
    value = _overrides.get("transport") or os.environ.get("MONARCH_RDMA_TRANSPORT") or "auto"
    return _check(value, TRANSPORTS, "MONARCH_RDMA_TRANSPORT")


def segment_kind() -> str:
    """How ring segments are made: one of `SEGMENT_KINDS`."""
    value = _overrides.get("segments") or os.environ.get("MONARCH_RDMA_SEGMENTS") or "memfd"
    return _check(value, SEGMENT_KINDS, "MONARCH_RDMA_SEGMENTS")


def _check(value: str, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value
