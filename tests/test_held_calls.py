"""Calls a script sends in a burst travel together (`monarch._wire._held`), and none is lost."""

from __future__ import annotations

import os

import pytest
from waiting import wait_until

from monarch.actor import Actor, endpoint, this_proc

pytestmark = pytest.mark.timeout(120)


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
    assert all(seen == list(range(40)) for seen in mesh.notes.call().get(timeout=30).values())
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
        assert all(seen == list(range(4)) * 20 for seen in mesh.notes.call().get(timeout=30).values())
    finally:
        local.stop().get(timeout=30)


def test_a_broadcast_nobody_waits_for_still_leaves(procs, tmp_path):
    mesh = procs.spawn("held_alone", Notes)
    mesh.notes.call().get(timeout=30)
    mesh.touch.broadcast(str(tmp_path))  # no future is waited on after it
    wait_until(lambda: len(os.listdir(tmp_path)) == 4, "every actor ran the broadcast")
