"""Leadership of a process's loop: one leader at a time, the baton never lost."""

from __future__ import annotations

import collections
import queue
import threading
from typing import Any

from monarch._runtime._leader import BATON, QUIET_CHECKS, WATCH, Leadership


def test_parked_baton_is_taken_without_waking_anyone():
    woken = []
    lead = Leadership(lambda: woken.append(1))
    me: queue.SimpleQueue = queue.SimpleQueue()
    lead.want(me)  # the I/O thread leads: the follower queues and wakes it
    assert woken == [1] and lead.wanted()
    assert lead.release(lead.io_queue) is False and me.get_nowait() is BATON
    assert lead.release(me) is False  # nobody waits: parked
    other: queue.SimpleQueue = queue.SimpleQueue()
    assert lead.want(other) is True and woken == [1]


def test_cancel_after_the_baton_was_handed_passes_it_on():
    lead = Leadership(lambda: None)
    me: queue.SimpleQueue = queue.SimpleQueue()
    me.put("work-1")
    lead.want(me)
    lead.release(lead.io_queue)  # hands BATON to me, behind work-1
    me.put("work-2")
    stash: collections.deque = collections.deque()
    lead.cancel(me, stash)
    assert list(stash) == ["work-1", "work-2"] and me.empty()  # in order, nothing left behind
    assert lead.take_if_parked(lead.io_queue, 0.0)  # it went back to being parked


def test_cancel_after_the_baton_was_taken_passes_it_on_without_waiting():
    """A signal's exception can land between the `get` that took the BATON and the lead: the
    follower gives up holding it, and `cancel` must not wait for a BATON already taken."""
    lead = Leadership(lambda: None)
    me: queue.SimpleQueue = queue.SimpleQueue()
    lead.want(me)
    lead.release(lead.io_queue)
    assert me.get_nowait() is BATON
    done = threading.Event()
    threading.Thread(target=lambda: (lead.cancel(me, None), done.set()), daemon=True).start()
    assert done.wait(10), "cancel waited for the baton its follower had already taken"
    assert lead.take_if_parked(lead.io_queue, 0.0)  # passed on: parked, nobody else wanted it


def test_io_thread_keeps_the_baton_when_its_follower_gave_up():
    lead = Leadership(lambda: None)
    me: queue.SimpleQueue = queue.SimpleQueue()
    lead.want(me)
    lead.cancel(me, None)
    assert lead.release(lead.io_queue) is True


def test_many_threads_never_lead_at_once():
    woken = threading.Event()
    lead = Leadership(woken.set)
    holders = []
    inside = threading.Lock()
    errors = []

    def io_thread() -> None:  # yields to the first follower, as the runtime's I/O thread does
        woken.wait(10)
        lead.release(lead.io_queue)

    def worker() -> None:
        me: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(200):
            if not lead.want(me) and me.get(timeout=10) is not BATON:
                errors.append("no baton")
                return
            if not inside.acquire(blocking=False):
                errors.append("two leaders")
            holders.append(1)
            inside.release()
            lead.release(me)

    threads = [threading.Thread(target=io_thread)] + [
        threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and len(holders) == 800


def test_io_thread_sleeps_while_nobody_parks_and_a_park_wakes_it():
    lead = Leadership(lambda: None)
    me: queue.SimpleQueue = queue.SimpleQueue()
    lead.want(me)
    lead.release(lead.io_queue)  # me leads now
    assert me.get_nowait() is BATON
    for _ in range(QUIET_CHECKS - 1):
        assert not lead.take_if_parked(lead.io_queue, 0.0)
    assert not lead.io_asleep
    assert not lead.take_if_parked(lead.io_queue, 0.0)
    assert lead.io_asleep  # QUIET_CHECKS looks saw the baton held and no park
    assert lead.io_queue.empty()
    assert lead.release(me) is False  # parked: the sleeping I/O thread is woken to watch
    assert not lead.io_asleep and lead.io_queue.get_nowait() is WATCH
    assert lead.take_if_parked(lead.io_queue, 0.0)


def test_a_park_between_checks_keeps_the_io_thread_watching():
    lead = Leadership(lambda: None)
    me: queue.SimpleQueue = queue.SimpleQueue()
    lead.want(me)
    lead.release(lead.io_queue)
    for _ in range(3 * QUIET_CHECKS):
        assert lead.release(me) is False  # a park (an actor went off to run its message)...
        assert lead.want(me) is True  # ...and back, before the I/O thread looked
        assert not lead.take_if_parked(lead.io_queue, 0.0)
    assert not lead.io_asleep and lead.io_queue.empty()


def test_a_leading_actor_goes_back_to_its_own_message_under_a_flood() -> None:
    """An actor's thread that leads while it waits stops draining the inbox soon after its own
    message came (every 16 messages it looks), not after the 10,000 a drain may take: under a
    flood of others' messages its caller would wait (a 60 s timeout in the soak). The I/O
    thread (no `until`) drains on."""
    from types import SimpleNamespace

    from monarch._runtime._process_runtime import ProcessRuntime

    def drained(until: Any) -> int:
        flood = iter(range(5_000))
        handled: list[int] = []

        def recv_nowait(sock: Any) -> tuple[int] | None:
            n = next(flood, None)
            return None if n is None else (n,)

        runtime = SimpleNamespace(inbox=SimpleNamespace(recv_nowait=recv_nowait),
                                  _handle=handled.append, _leader_until=until)
        ProcessRuntime._drain_inbox(runtime, None)  # type: ignore[arg-type]
        return len(handled)

    assert drained(lambda: True) == 1  # its message is there: back after the first
    came_later = iter([False] * 3 + [True])
    assert drained(lambda: next(came_later)) == 49  # looks at 1, 17, 33, 49: back then
    assert drained(None) == 5_000  # the I/O thread drains what there is
