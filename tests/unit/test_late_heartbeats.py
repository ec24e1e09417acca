"""A worker or controller whose tick comes late (starved of CPU: 64 busy procs on 2 cores)
still sends its heartbeat. A late tick gives the peers a fresh window (their heartbeats may
wait unread), and it used to skip its own beat too: a worker late at every tick never beat,
and its controller declared the host lost while both were alive (`bench_api.py scale1k_hosts`,
16 hosts under a broadcast burst)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from monarch._controller._remote import WorkerRecord, Workers
from monarch._host.worker import (HEARTBEAT_S, SILENCE_S, SWAMPED_MAX_S, OwnGaps, Swamped,
                                  Worker)
from monarch._runtime._gather import HostLoad


class Runtime:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.address = "tcp://127.0.0.1:1"
        self._closing = False
        self.outbox = SimpleNamespace(forget=lambda address: None)

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
        _report_refusals=lambda: None, release=lambda *a, **k: released.append(a), tick=None,
        _swamped=Swamped())
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
        _swamped=Swamped(),
        job=SimpleNamespace(supervisor=SimpleNamespace(lost_host=lambda *a: lost.append(a))))
    Workers._tick(workers)  # type: ignore[arg-type]
    assert runtime.sent == [("tcp://host0", "heartbeat")] and not lost and not record.lost


def loadavg(tmp_path, runnable: int) -> HostLoad:
    path = tmp_path / f"loadavg-{runnable}"
    path.write_text(f"9.0 8.0 7.0 {runnable}/2000 12345\n")
    return HostLoad(str(path), cpus=2)


def test_a_swamped_host_postpones_judging_silence_for_a_while(tmp_path) -> None:
    """On a host with hundreds of runnable threads per CPU, heartbeats that were sent arrive
    seconds late: silence is not judged there, for at most `SWAMPED_MAX_S` in a row."""
    calm, swamped = Swamped(loadavg(tmp_path, 4)), Swamped(loadavg(tmp_path, 900))
    assert not calm.postpones(100.0, due=True)  # 2 runnable per CPU: judged as ever
    assert not swamped.postpones(100.0, due=False)  # nobody past the window: nothing to wait
    assert swamped.postpones(100.0, due=True)
    assert swamped.postpones(100.0 + SWAMPED_MAX_S - 1, due=True)
    assert not swamped.postpones(100.0 + SWAMPED_MAX_S, due=True)  # a gone host is found
    swamped = Swamped(loadavg(tmp_path, 900))
    assert swamped.postpones(300.0, due=True)
    swamped.load = loadavg(tmp_path, 4)  # calm again: judged once the window's samples are
    for tick in range(int(SILENCE_S / HEARTBEAT_S) - 1):
        assert swamped.postpones(301.0 + tick, due=True)  # the window still saw the swamp
    assert not swamped.postpones(310.0, due=True) and swamped.since is None


def test_a_brief_swamp_within_the_window_counts(tmp_path) -> None:
    """Runnable threads come and go by the millisecond: the worst sample of the window
    counts, not the one taken at the judgement."""
    swamped = Swamped(loadavg(tmp_path, 900))
    assert not swamped.postpones(100.0, due=False)  # sampled, nothing to judge
    swamped.load = loadavg(tmp_path, 2)
    assert swamped.postpones(101.0, due=True)


def test_a_swamped_controller_spares_a_silent_host_and_then_judges_it(tmp_path) -> None:
    runtime = Runtime()
    record = WorkerRecord("tcp://host0", hostname="host0")
    lost = []
    workers = SimpleNamespace(
        runtime=runtime, hosts={"tcp://host0": record}, _gaps=OwnGaps(), _tick=None,
        _swamped=Swamped(loadavg(tmp_path, 900)), _forget_lost=lambda: None,
        job=SimpleNamespace(supervisor=SimpleNamespace(lost_host=lambda *a: lost.append(a))))
    record.heard = time.monotonic() - SILENCE_S - 1
    Workers._tick(workers)  # type: ignore[arg-type]
    assert not lost and not record.lost  # a fresh window
    workers._swamped.since = time.monotonic() - SWAMPED_MAX_S  # swamped for too long
    record.heard = time.monotonic() - SILENCE_S - 1
    workers._gaps = OwnGaps()
    Workers._tick(workers)  # type: ignore[arg-type]
    assert record.lost and len(lost) == 1


def test_a_tick_that_loses_a_host_past_the_kept_records_survives() -> None:
    """Losing a host when `KEEP_LOST` lost ones are kept forgets the oldest during the tick's
    walk over the hosts (it raised "dictionary changed size during iteration")."""
    from monarch._controller._remote import KEEP_LOST

    runtime = Runtime()
    hosts = {f"tcp://gone{i}": WorkerRecord(f"tcp://gone{i}", hostname=f"gone{i}", lost=True)
             for i in range(KEEP_LOST)}
    silent = WorkerRecord("tcp://host0", hostname="host0", heard=time.monotonic() - 60.0)
    hosts[silent.address] = silent
    lost = []
    workers = SimpleNamespace(
        runtime=runtime, hosts=hosts, _gaps=OwnGaps(), _tick=None, _swamped=Swamped(),
        job=SimpleNamespace(supervisor=SimpleNamespace(lost_host=lambda *a: lost.append(a))))
    workers._forget_lost = lambda: Workers._forget_lost(workers)  # type: ignore[arg-type]
    Workers._tick(workers)  # type: ignore[arg-type]
    assert silent.lost and len(lost) == 1
    assert len(hosts) == KEEP_LOST and "tcp://gone0" not in hosts  # the oldest went
