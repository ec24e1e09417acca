"""What a proc's telemetry look takes of its actors: everything with each bulk shipment, and in
between only what cannot wait (`_instrument.actor_sampler`)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from monarch._runtime._instrument import EARLY_ENTRIES, actor_sampler
from telemetry._recorder import Recorder


def slot(actor_id: str) -> SimpleNamespace:
    return SimpleNamespace(
        instance=SimpleNamespace(actor_id=actor_id), recorded=0, unshipped=deque(),
        lifecycle=deque(), running={}, waiting=deque(), state="running", rank=SimpleNamespace(
            rank=0), header=SimpleNamespace(mesh="m1", name="trainer", class_name="Trainer"),
        queue_depth=lambda: 0)


def handle(s: SimpleNamespace, n: int) -> None:
    for _ in range(n):
        s.unshipped.append(("step", "root", 1, 2, "ok", 0, 0))
        s.recorded += 1


def taken(recorder: Recorder) -> tuple[list[str], int]:
    """(actors whose status was taken, flight-recorder entries taken) since the last call."""
    wire = recorder.drain()
    if wire is None:
        return [], 0
    return sorted(s[0] for s in wire[9]), sum(len(g[4]) if isinstance(g[4], list)
                                              else len(g[4]["m"]) for g in wire[10])


def test_a_look_between_bulk_shipments_takes_only_what_cannot_wait() -> None:
    a, b, c = slot("a"), slot("b"), slot("c")
    runtime = SimpleNamespace(actors={"a": a, "b": b, "c": c},
                              identity=SimpleNamespace(name="proc-0"))
    recorder = Recorder()
    sample = actor_sampler(runtime, recorder, queue_depth=False)
    assert sample(full=True) is False  # nothing handled yet
    assert taken(recorder) == (["a", "b", "c"], 0)  # the first statuses
    handle(a, 3)
    a.running = {1: ("step", 5, "root", None, 0)}  # a status that changed: it waits too
    handle(b, EARLY_ENTRIES)  # a busy actor: its recorder would lose entries by the next full one
    b.running = {2: ("step", 6, "root", None, 0)}  # its changed status waits, as a's does
    c.lifecycle.append(("stopping", 1))
    assert sample(full=False) is True  # a and b handled messages
    assert taken(recorder) == (["c"], EARLY_ENTRIES)  # a's 3 entries and status wait
    assert sample(full=False) is False
    assert sample(full=True) is False
    assert taken(recorder) == (["a", "b"], 3)  # now a's, once; b's entries were taken already
    handle(a, 1)
    assert sample(full=False) is True and taken(recorder) == ([], 0)
    assert sample(full=True) is False and taken(recorder)[1] == 1


def test_an_actor_that_handles_many_between_looks_loses_no_entry() -> None:
    """A recorder that kept the newest 64 lost the oldest, uncounted, once an actor handled
    more than 64 messages between two looks (over ~640 a second)."""
    a = slot("a")
    runtime = SimpleNamespace(actors={"a": a}, identity=SimpleNamespace(name="proc-0"))
    recorder = Recorder()
    sample = actor_sampler(runtime, recorder, queue_depth=False)
    handle(a, 500)
    sample(full=False)
    handle(a, 300)
    sample(full=True)
    assert taken(recorder)[1] == 800 and not a.unshipped
