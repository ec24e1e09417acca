"""The calls the runtime makes on its hot paths: cheap metric bumps and record hand-offs.

Each is a dict update under one short lock (or a deque append) on the process recorder; the
values leave the process as `MetricPoint` records when the recorder is drained.
"""

from __future__ import annotations

import os
import socket
import time

from ._recorder import process_recorder
from ._records import FailureRecord, TransferRecord


def count_message(mesh: str, method: str) -> None:
    """Counts one endpoint message handled (``messages_handled{mesh, method}``)."""
    process_recorder().metrics.inc(("messages_handled", mesh, method))


def observe_handler_latency(mesh: str, method: str, seconds: float) -> None:
    """Adds one handler duration to ``handler_latency_seconds{mesh, method}``."""
    process_recorder().metrics.observe(("handler_latency_seconds", mesh, method), seconds)


def set_queue_depth(actor: str, n: int) -> None:
    """Sets ``queue_depth{actor}``: messages waiting in that actor's queue."""
    process_recorder().metrics.set(("queue_depth", actor), n)


def count_bytes(direction: str, n: int) -> None:
    """Adds ``n`` to ``message_bytes{direction}`` (``sent`` or ``received``)."""
    process_recorder().metrics.inc(("message_bytes", direction), n)


def count_failure(mesh: str) -> None:
    """Counts one actor failure (``failures{mesh}``)."""
    process_recorder().metrics.inc(("failures", mesh))


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


def record_failure(mesh: str, rank: int | None, actor_class: str, reason: str, *,
                   traceback: str = "", exit_code: int | None = None,
                   signal: int | None = None, host: str | None = None,
                   pid: int | None = None) -> FailureRecord:
    """Records a failure seen in this process (defaults: this host and pid); counts it too.

    Returns:
        The record, for the caller to forward elsewhere if it wants.
    """
    recorder = process_recorder()
    record = FailureRecord(
        mesh, rank, actor_class, host or str(recorder.resource.get("host") or _hostname()),
        os.getpid() if pid is None else pid, exit_code, signal, reason, traceback,
        time.time_ns(), recorder.source)
    recorder.add_failure(record)
    count_failure(mesh)
    return record


def _hostname() -> str:
    return socket.gethostname()
