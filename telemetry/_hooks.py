"""The calls the runtime makes on its hot paths: cheap metric bumps and record hand-offs.

Each is a dict update under one short lock (or a deque append) on the process recorder; the
values leave the process as `MetricPoint` records when the recorder is drained.
"""

from __future__ import annotations

import time

from ._recorder import process_recorder
from ._records import TransferRecord


def set_queue_depth(actor: str, n: int) -> None:
    """Sets ``queue_depth{actor}``: messages waiting in that actor's queue."""
    process_recorder().metrics.set(("queue_depth", actor), n)


def record_transfer(nbytes: int, seconds: float, src: str, dst: str, kind: str,
                    mesh: str | None = None) -> None:
    """Records one finished data-plane transfer (a `TransferRecord` plus byte/count metrics).

    Args:
        nbytes: bytes moved.
        seconds: how long it took.
        src: process the bytes came from.
        dst: process the bytes went to.
        kind: path taken, e.g. ``shm`` or ``tcp``.
        mesh: the actor mesh that asked for it, if known.
    """
    recorder = process_recorder()
    recorder.add_transfer(TransferRecord(nbytes, seconds, src, dst, kind, time.time_ns(), mesh,
                                         recorder.source))
    recorder.metrics.inc(("transfer_bytes", kind), nbytes)
    recorder.metrics.inc(("transfers", kind))
