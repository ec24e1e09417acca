"""A leader waiting for many replies on a busy host reads them in batches (`monarch._runtime._gather`)."""

from __future__ import annotations

import os
import queue
import threading

import pytest

from monarch._runtime import _clock, _gather
from monarch._runtime._future import Future
from monarch._runtime._ports import CallInfo, CallSink, OneSink
from monarch._runtime._process_runtime import ProcessRuntime
from monarch._wire._messages import OK, Reply

pytestmark = pytest.mark.timeout(60)

INFO = CallInfo("mesh", "noop", str)


def loadavg(tmp_path, runnable: int, cpus: int = 2) -> _gather.HostLoad:
    path = tmp_path / f"loadavg-{runnable}"
    path.write_text(f"0.52 0.58 0.59 {runnable}/312 4242\n")
    return _gather.HostLoad(str(path), cpus=cpus)


def test_the_host_is_busy_when_more_threads_are_runnable_than_it_has_cpus(tmp_path):
    assert loadavg(tmp_path, 3).busy()
    assert not loadavg(tmp_path, 2).busy()
    assert not loadavg(tmp_path, 9, cpus=16).busy()
    garbled = tmp_path / "garbled"
    garbled.write_text("not a load average\n")
    assert not _gather.HostLoad(str(garbled), cpus=1).busy()
    assert not _gather.HostLoad(str(tmp_path / "absent"), cpus=1).busy()


def test_the_real_host_load_reads(tmp_path):
    if not os.path.exists("/proc/loadavg"):
        pytest.skip("no /proc/loadavg on this system")
    load = _gather.HostLoad()
    assert load.busy() in (True, False)
    assert loadavg(tmp_path, 10**6).busy()  # the parse the real file goes through


@pytest.fixture
def runtime(bare_runtime):
    return bare_runtime


def call_sink(runtime: ProcessRuntime, n: int) -> tuple[Future, CallSink, int]:
    future: Future = Future._pending()
    sink = CallSink(future, [f"ipc://nowhere-{i}" for i in range(n)], INFO, list)
    return future, sink, runtime.new_port(sink)


def test_a_leader_gathers_only_for_many_replies_on_a_busy_host(runtime, tmp_path, monkeypatch):
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 5))
    _, big, _ = call_sink(runtime, 16)
    assert runtime.gathering(big)
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 1))
    assert not runtime.gathering(big)  # CPUs to spare: each reply as it comes


def test_few_replies_are_read_as_they_come_even_on_a_busy_host(runtime, tmp_path, monkeypatch):
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 50))
    for _ in range(20):  # single calls pending do not count
        runtime.new_port(OneSink(Future._pending(), "ipc://nowhere", INFO))
    _, small, _ = call_sink(runtime, _gather.MIN_REPLIES - 1)
    assert not runtime.gathering(small)
    _, other, _ = call_sink(runtime, 1)  # with another call pending: enough replies are due
    assert runtime.gathering(small)
    small.missing = 0  # the call waited for has all its replies: its leader must not pause
    assert not runtime.gathering(small)


def test_a_gathering_leader_pauses_then_reads_the_replies_in_one_go(runtime, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 5))
    runtime.start()
    future, sink, port = call_sink(runtime, 16)
    assert future._gather is sink
    pauses = []

    def pause() -> None:  # the replies arrive while the leader pauses
        if not pauses:
            for i in range(16):
                runtime.outbox.send(runtime.address, Reply(port, i, OK, _clock.now(), 0))
        pauses.append(sink.missing)

    monkeypatch.setattr(_gather, "pause", pause)
    assert future.get(timeout=30) == [None] * 16
    assert pauses and pauses[0] == 16
    assert future._gather is None  # a settled future lets go of its sink


def test_an_idle_leader_gathers_for_the_calls_other_threads_wait_on(runtime, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 5))
    assert not runtime.gathering(_gather.ANY)  # nothing pending
    future, sink, port = call_sink(runtime, 16)
    assert runtime.gathering(_gather.ANY)
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 1))
    assert not runtime.gathering(_gather.ANY)


def test_an_idle_leader_on_another_thread_pauses_while_a_call_waits(runtime, tmp_path,
                                                                    monkeypatch):
    # An idle actor's thread (here: a plain thread leading as it does) holds the baton while
    # the main thread waits on a call to 16 actors: the replies are read in batches all the same.
    monkeypatch.setattr(_gather, "host_load", loadavg(tmp_path, 5))
    runtime.start()
    future, sink, port = call_sink(runtime, 16)
    pauses: list[int] = []

    def pause() -> None:
        if not pauses:
            for i in range(16):
                runtime.outbox.send(runtime.address, Reply(port, i, OK, _clock.now(), 0))
        pauses.append(sink.missing)

    monkeypatch.setattr(_gather, "pause", pause)
    leading, stop = threading.Event(), threading.Event()

    def idle_leader() -> None:
        me: queue.SimpleQueue = queue.SimpleQueue()
        if not runtime.leadership.want(me):
            me.get(timeout=30)  # the baton
        leading.set()
        runtime.lead(me, stop.is_set, None, _gather.ANY)

    thread = threading.Thread(target=idle_leader, daemon=True)
    thread.start()
    assert leading.wait(30)
    try:
        assert future.get(timeout=30) == [None] * 16
        assert pauses and pauses[0] == 16
    finally:
        stop.set()
        runtime.wake()
        thread.join(30)
    assert not thread.is_alive()


class _Racing:
    """A sink whose `missing` lets another thread run, which adds a call's port meanwhile
    (as a caller's thread does while the loop's leader scans the ports)."""

    def __init__(self, ports: dict) -> None:
        self.ports = ports

    @property
    def missing(self) -> int:
        self.ports[object()] = self  # what another thread did between two sinks
        return 1


def test_scanning_the_ports_while_a_caller_adds_one_does_not_fail():
    """The soak's RL loop stalled after 7-42 minutes: the controller's weights index, leading
    the loop while idle, died of "dictionary changed size during iteration" here."""
    class Fake:
        ports: dict = {}

    fake = Fake()
    fake.ports = {}
    fake.ports.update({object(): _Racing(fake.ports) for _ in range(4)})
    assert ProcessRuntime.gathering(fake, _gather.ANY) in (True, False)
