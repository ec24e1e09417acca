"""A worker or controller whose tick comes late (starved of CPU: 64 busy procs on 2 cores)
still sends its heartbeat. A late tick gives the peers a fresh window (their heartbeats may
wait unread), and it used to skip its own beat too: a worker late at every tick never beat,
and its controller declared the host lost while both were alive (`bench_api.py scale1k_hosts`,
16 hosts under a broadcast burst)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from monarch._controller._remote import WorkerRecord, Workers
from monarch._host.worker import HEARTBEAT_S, OwnGaps, Worker


class Runtime:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.address = "tcp://127.0.0.1:1"
        self._closing = False

    def notify(self, address: str, topic: str, body: dict) -> None:
        self.sent.append((address, topic))

    def call_later(self, delay: float, fn) -> None:
        pass


def late_gaps() -> OwnGaps:
    gaps = OwnGaps()
    gaps._ticked = time.monotonic() - 3 * HEARTBEAT_S  # the last tick: three beats ago
    return gaps


def test_a_late_worker_tick_still_beats_and_spares_its_controller() -> None:
    runtime = Runtime()
    link = SimpleNamespace(address="tcp://ctl", heard=time.monotonic() - 60.0)
    released = []
    worker = SimpleNamespace(
        runtime=runtime, controllers={"tcp://ctl": link}, _gaps=late_gaps(),
        _report_refusals=lambda: None, release=lambda *a, **k: released.append(a), tick=None)
    Worker.tick(worker)  # type: ignore[arg-type]
    assert runtime.sent == [("tcp://ctl", "worker_heartbeat")]
    assert not released and link.heard >= time.monotonic() - 1.0  # a fresh window
    Worker.tick(worker)  # type: ignore[arg-type]  # on time now: beats again
    assert runtime.sent[-1] == ("tcp://ctl", "worker_heartbeat") and len(runtime.sent) == 2


def test_a_late_controller_tick_still_beats_and_spares_its_hosts() -> None:
    runtime = Runtime()
    record = WorkerRecord("tcp://host0", hostname="host0", heard=time.monotonic() - 60.0)
    lost = []
    workers = SimpleNamespace(
        runtime=runtime, hosts={"tcp://host0": record}, _gaps=late_gaps(), _tick=None,
        job=SimpleNamespace(supervisor=SimpleNamespace(lost_host=lambda *a: lost.append(a))))
    Workers._tick(workers)  # type: ignore[arg-type]
    assert runtime.sent == [("tcp://host0", "heartbeat")] and not lost and not record.lost
