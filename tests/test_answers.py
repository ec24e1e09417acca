"""Held answers (`monarch._wire._answers`): the answers of a proc's actors that finish together
leave as one Replies, in order, and a long handler never holds back the answers before it.

First the parts alone (a HeldAnswers with a recording send, a runtime of this process); then in
the session's job: many actors of one proc answering at once, a port sent to many times among
them, and an actor blocked in its handler beside one that answers."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from monarch._runtime._future import Future
from monarch._runtime._ports import CallInfo, CallSink
from monarch._runtime._process_runtime import ProcessRuntime, current
from monarch._wire._answers import MAX_HELD, SMALL, HeldAnswers
from monarch._wire._messages import OK, Replies, Reply
from monarch.actor import Actor, Channel, Port, endpoint

pytestmark = pytest.mark.timeout(120)


def reply(port: int, index: int = 0) -> Reply:
    return Reply(port, index, OK, 0, 1)


def recording() -> tuple[HeldAnswers, list]:
    sent: list = []
    return HeldAnswers(lambda address, msg, frames, block: sent.append((address, msg, frames))), sent


def test_answers_held_while_due_leave_with_the_next_one_as_one_replies_in_order():
    answers, sent = recording()
    for port in (1, 2, 3):
        answers.answer("a", reply(port), [b"a%d" % port], True, lambda: True)
    answers.answer("b", reply(9), [b"b9"], True, lambda: True)
    assert sent == []
    answers.answer("a", reply(4), [b"a4"], True, lambda: False)
    ((address, msg, frames),) = sent
    assert address == "a" and type(msg) is Replies and msg.nframes == 4
    assert [fields[0] for fields in msg.replies] == [1, 2, 3, 4]
    assert frames == [b"a1", b"a2", b"a3", b"a4"]
    assert list(answers.by_address) == ["b"]  # another destination's answers still wait
    answers.release(None, block=True)
    assert type(sent[1][1]) is Reply and sent[1][1].port == 9 and not answers.by_address


def test_an_answer_not_due_with_nothing_held_leaves_alone():
    answers, sent = recording()
    answers.answer("a", reply(1), [b"x"], True, lambda: False)
    assert [(address, type(msg)) for address, msg, _ in sent] == [("a", Reply)]


def test_a_large_answer_is_never_held_and_leaves_after_those_held_before_it():
    answers, sent = recording()
    answers.answer("a", reply(1), [b"x"], True, lambda: True)
    answers.answer("a", reply(2), [b"x" * (SMALL + 1)], True, lambda: True)
    answers.answer("a", reply(3), [b"p", b"buffer"], True, lambda: True)  # out-of-band parts
    assert [msg.port for _, msg, _ in sent] == [1, 2, 3] and not answers.by_address


def test_answers_to_a_backlogged_link_are_not_held():
    sent: list = []
    full = {"a"}
    answers = HeldAnswers(lambda address, msg, frames, block: sent.append((address, msg, block)),
                          full.__contains__)
    answers.answer("a", reply(1), [b"x"], True, lambda: True)
    answers.answer("b", reply(2), [b"x"], True, lambda: True)
    assert sent == [("a", reply(1), True)] and list(answers.by_address) == ["b"]


def test_a_full_destination_leaves_without_waiting_for_more():
    answers, sent = recording()
    for port in range(MAX_HELD):
        answers.answer("a", reply(port), [b"x"], True, lambda: True)
    assert len(sent) == 1 and len(sent[0][1].replies) == MAX_HELD and not answers.by_address


def test_release_unless_busy_and_the_loop_never_waits_for_the_lock():
    answers, sent = recording()
    answers.answer("a", reply(1), [b"x"], True, lambda: True)
    answers.release_unless(lambda: True)
    assert sent == []
    with answers.lock:  # another thread holds or releases right now
        done = threading.Event()
        threading.Thread(target=lambda: (answers.release(None, block=False), done.set())).start()
        assert done.wait(10)
        assert sent == []
    answers.release_unless(lambda: False)
    assert len(sent) == 1 and not answers.by_address


def test_replies_reach_their_sinks_and_malformed_ones_are_counted(bare_runtime):
    runtime = bare_runtime
    future: Future = Future._pending()
    sink = CallSink(future, ["ipc://a", "ipc://b"], CallInfo("mesh", "noop", str), list)
    port = runtime.new_port(sink)
    bad = runtime.inbox.stats.bad_frames
    runtime._handle(Replies((("garbage",), (port, 0, OK, 0, 0)), 0), [])
    runtime._handle(Replies(((port, 0, OK, 0, 5),), 1), [b""])  # more frames than sent
    assert runtime.inbox.stats.bad_frames == bad + 2 and not future.done()
    runtime._handle(Replies(((port, 1, OK, 0, 0), (port, 0, OK, 0, 0)), 0), [])
    assert future.result(timeout=10) == [None, None] and port not in runtime.ports


class Slot:
    """What `ProcessRuntime.hold_answer` reads of an actor slot."""

    def __init__(self) -> None:
        self.idle = True
        self.taken = 0

    def take(self, runtime: ProcessRuntime, busy: bool = True) -> None:
        self.idle = not busy
        self.taken += 1
        runtime.took(self)


def test_the_last_slot_about_to_answer_sends_the_held_ones_as_it_takes_its_message(
        bare_runtime):
    runtime = bare_runtime
    sent: list = []
    runtime.outbox.answers._send = lambda address, msg, frames, block: sent.append(msg)
    a, b = Slot(), Slot()
    runtime.imminent.update((a, b))  # both were given a message while idle
    runtime.reply(("ipc://caller", 1), 0, OK)  # this thread is not the loop: held
    runtime.reply(("ipc://caller", 2), 0, OK)
    assert sent == []
    a.take(runtime)
    assert sent == []  # b is still about to take its message
    b.take(runtime)  # before b's handler runs
    assert [type(msg) for msg in sent] == [Replies] and not runtime.imminent
    runtime.imminent.add(a)  # stale: a took its message and runs its handler
    runtime.reply(("ipc://caller", 3), 0, OK)
    assert type(sent[-1]) is Reply and sent[-1].port == 3


def test_held_answers_wait_for_one_message_of_each_slot_about_to_take_one(bare_runtime):
    """A burst of messages to idle actors keeps some slot about to take one at every take:
    the answers wait only for the slots that were about to when the first was held."""
    runtime = bare_runtime
    sent: list = []
    runtime.outbox.answers._send = lambda address, msg, frames, block: sent.append(msg)
    a, b, c = Slot(), Slot(), Slot()
    runtime.imminent.update((a, b))
    runtime.reply(("ipc://caller", 1), 0, OK)  # waits for a and b
    a.take(runtime, busy=False)  # a took one and is idle again, with its next message
    runtime.imminent.update((a, c))  # c was given one too
    runtime.reply(("ipc://caller", 2), 0, OK)  # held with the first: for b alone
    assert sent == []
    b.take(runtime, busy=False)
    assert len(sent) == 1 and len(sent[0].replies) == 2  # a and c still about to take one


# -- in the session's job -------------------------------------------------------------------

class Answerer(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def count(self, port: Port, n: int) -> None:
        for i in range(n):
            port.send(i)


class Gate(Actor):
    """`wait` blocks until `open` is called on another Gate of its proc (a proc-wide event)."""

    @endpoint
    def wait(self) -> bool:
        return sys.__dict__["_test_answers_gate"].wait(60)

    @endpoint
    def open(self) -> None:
        sys.__dict__["_test_answers_gate"].set()

    @endpoint
    def reset(self) -> None:
        sys.__dict__["_test_answers_gate"] = threading.Event()


def received() -> int:
    runtime = current()
    assert runtime is not None
    return runtime.inbox.stats.received


def test_the_answers_of_a_procs_actors_leave_together(procs):
    one = procs.slice(gpus=0)
    meshes = [one.spawn(f"answers{i}", Answerer) for i in range(12)]
    pids = {mesh.pid.call_one().get(timeout=30) for mesh in meshes}
    assert len(pids) == 1
    fewest = None
    for _ in range(5):  # a round: one call to each of the 12 actors of one proc
        before = received()
        futures = [mesh.pid.call() for mesh in meshes]
        assert {next(iter(f.get(timeout=30).values())) for f in futures} == pids
        fewest = min(fewest or 99, received() - before)
    # 12 Replies one by one; held, two or three messages (and any telemetry shipment)
    assert fewest is not None and fewest <= 6


def test_a_port_sent_to_many_times_keeps_its_order_among_others_answering(procs):
    one = procs.slice(gpus=0)
    counter = one.spawn("answers_counter", Answerer)
    others = [one.spawn(f"answers_other{i}", Answerer) for i in range(8)]
    port, receiver = Channel.open()
    for _ in range(3):
        futures = [counter.count.call(port, 200), *(mesh.pid.call() for mesh in others)]
        for future in futures:
            future.get(timeout=30)
        assert [receiver.recv().get(timeout=30) for _ in range(200)] == list(range(200))


def test_a_blocked_handler_never_holds_back_the_answer_beside_it(procs):
    """End to end: whichever of the two takes its message first, `fast`'s answer leaves while
    `gate`'s handler blocks (the unit test above pins the release at the take)."""
    one = procs.slice(gpus=0)
    gate, keeper = one.spawn("answers_gate", Gate), one.spawn("answers_keeper", Gate)
    fast = one.spawn("answers_fast", Answerer)
    for _ in range(10):
        keeper.reset.call_one().get(timeout=30)
        waiting = gate.wait.call_one()
        assert fast.pid.call_one().get(timeout=30) > 0  # answered while the gate still waits
        assert not waiting.done()
        keeper.open.call_one().get(timeout=30)
        assert waiting.get(timeout=30) is True
