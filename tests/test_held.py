"""Held calls (`monarch._wire._held`): one Batch per destination, in order, never stuck.

First the parts alone (a HeldCalls with a recording send, a runtime of this process); then in
the session's job: calls a script sends in a burst travel together, and none is lost."""

from __future__ import annotations

import os
import threading

import pytest
from waiting import wait_until

from monarch._runtime._future import Future
from monarch._runtime._ports import CallInfo, CallSink
from monarch._wire._held import MAX_HELD, HeldCalls
from monarch._wire._messages import Batch, Call
from monarch.actor import Actor, endpoint, this_proc

pytestmark = pytest.mark.timeout(120)


def fields(i: int, port: tuple | None = None) -> Call:
    return Call("sender", "mesh", "noop", "procs", (), 0, 2, ((i, 2),), port, None, 0, 1)


def test_held_calls_leave_as_one_batch_per_destination_in_order():
    sent: list = []
    held = HeldCalls(lambda address, msg, frames, block: sent.append((address, msg, frames)))
    assert held.hold("a", fields(1), [b"a1"]) is True
    assert held.hold("b", fields(2), [b"b2"]) is False
    assert held.hold("a", fields(3), [b"a3"]) is False
    assert sent == []
    held.release(block=True)
    assert not held.by_address
    (a, batch, a_frames), (b, call, b_frames) = sent
    assert a == "a" and type(batch) is Batch and [c[7] for c in batch.calls] == [((1, 2),),
                                                                                  ((3, 2),)]
    assert batch.nframes == 2 and a_frames == [b"a1", b"a3"]
    assert b == "b" and type(call) is Call and call.seqs == ((2, 2),) and b_frames == [b"b2"]


def test_a_full_destination_leaves_without_waiting_for_a_release():
    sent: list = []
    held = HeldCalls(lambda address, msg, frames, block: sent.append(msg))
    for i in range(MAX_HELD):
        held.hold("a", fields(i), [b"x"])
    assert len(sent) == 1 and len(sent[0].calls) == MAX_HELD and not held.by_address


def test_the_loop_never_waits_for_another_threads_release():
    sent: list = []
    held = HeldCalls(lambda address, msg, frames, block: sent.append(msg))
    held.hold("a", fields(1), [b"x"])
    with held.lock:  # another thread is releasing (or holding) right now
        done = threading.Event()
        threading.Thread(target=lambda: (held.release(block=False), done.set())).start()
        assert done.wait(10)
        assert sent == []
    held.release(block=False)
    assert len(sent) == 1


def test_held_calls_that_cannot_leave_answer_their_callers(bare_runtime):
    runtime = bare_runtime
    future: Future = Future._pending()
    sink = CallSink(future, ["ipc://gone", "ipc://other"], CallInfo("mesh", "noop", str), list)
    port = runtime.new_port(sink)
    lost = Batch((Call._getter(fields(1, (runtime.address, port))),
                  Call._getter(fields(2, None))), 2)
    runtime.outbox.on_held_lost("ipc://gone", lost, "not taken within 30 s")
    assert port not in runtime.ports
    assert "not taken within 30 s" in str(future.exception(timeout=10))


def test_calls_that_cannot_leave_are_reported_once_the_lock_is_free():
    reported: list = []
    held: HeldCalls

    def send(address, msg, frames, block) -> None:
        lost.append(address)

    def after() -> None:  # a failed caller's callback may hold a call again
        reported.extend(lost)
        lost.clear()
        assert not held.lock.locked()
        if len(reported) == 1:
            held.hold("again", fields(9), [b"x"])

    lost: list = []
    held = HeldCalls(send, after)
    held.hold("gone", fields(1), [b"x"])
    held.release(block=True)
    assert reported == ["gone"] and list(held.by_address) == ["again"]


# -- in the session's job -------------------------------------------------------------------

class Notes(Actor):
    def __init__(self) -> None:
        self.seen: list[int] = []

    @endpoint
    def note(self, i: int) -> None:
        self.seen.append(i)

    @endpoint
    def notes(self) -> list[int]:
        return list(self.seen)

    @endpoint
    def touch(self, directory: str) -> None:
        with open(os.path.join(directory, f"{os.getpid()}-{len(self.seen)}"), "w"):
            pass


def received_at_first_hop(procs) -> int:
    return procs.stats().get(timeout=30).get(0)["received"]


def test_a_burst_of_calls_reaches_the_first_hop_as_one_message_in_order(procs):
    mesh = procs.spawn("held_burst", Notes)
    mesh.notes.call().get(timeout=30)
    before = received_at_first_hop(procs)
    futures = [mesh.note.call(i) for i in range(40)]
    single = procs.slice(gpus=0).spawn("held_single", Notes)  # a spawn: sent at once, after them
    for future in futures:
        future.get(timeout=30)
    # 40 messages sent one by one; held, a Batch or two (and the spawn, and the stats call)
    assert received_at_first_hop(procs) - before < 20
    assert list(mesh.notes.call().get(timeout=30).values()) == [list(range(40))] * 4
    assert single.notes.call_one().get(timeout=30) == []


def test_a_leader_on_another_thread_does_not_split_the_burst(procs):
    # An actor of the controller's own process leads its loop while idle: the first held call
    # wakes it, and it must leave the burst to the thread that waits for it (`_held.HOLD_S`).
    local = this_proc().spawn("held_local", Notes)
    try:
        local.notes.call_one().get(timeout=30)
        mesh = procs.spawn("held_split", Notes)
        mesh.notes.call().get(timeout=30)
        before = received_at_first_hop(procs)
        for _ in range(20):
            futures = [mesh.note.call(i) for i in range(4)]
            for future in futures:
                future.get(timeout=30)
        # 20 bursts of 4 calls: 20 Batches (and the stats call); split, up to 80 messages
        assert received_at_first_hop(procs) - before <= 30
        assert list(mesh.notes.call().get(timeout=30).values()) == [list(range(4)) * 20] * 4
    finally:
        local.stop().get(timeout=30)


def test_a_broadcast_nobody_waits_for_still_leaves(procs, tmp_path):
    mesh = procs.spawn("held_alone", Notes)
    mesh.notes.call().get(timeout=30)
    mesh.touch.broadcast(str(tmp_path))  # no future is waited on after it
    wait_until(lambda: len(os.listdir(tmp_path)) == 4, "every actor ran the broadcast")
