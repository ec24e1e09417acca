"""Per-sender FIFO: numbering at the sender, reordering at the receiver."""

from __future__ import annotations

import random

from monarch._runtime._ordering import Numbering, Reorder


def test_numbering_is_per_sender_mesh_and_rank():
    numbering = Numbering()
    assert numbering.take("s", "m", [0, 1, 2]) == ((0, 3),)  # runs: (number, how many ranks)
    assert numbering.take_one("s", "m", 1) == 1
    assert numbering.take("s", "m", [0, 1]) == ((1, 1), (2, 1))
    assert numbering.take_one("t", "m", 1) == 0


def test_whole_mesh_casts_number_every_rank_like_one_by_one():
    """A cast to every actor moves one base, not one counter per actor; whatever mix of
    whole casts, slices and single calls, each rank's numbers are 0, 1, 2... with no gap."""
    rng = random.Random(7)
    ranks = list(range(8))
    numbering, expected = Numbering(), dict.fromkeys(ranks, 0)
    for _ in range(500):
        kind = rng.choice(["whole", "whole", "slice", "one"])
        if kind == "whole":
            got = _expand(numbering.take("s", "m", ranks, whole=True))
            targets = ranks
        elif kind == "slice":
            targets = sorted(rng.sample(ranks, rng.randint(2, 7)))
            got = _expand(numbering.take("s", "m", targets))
        else:
            targets = [rng.choice(ranks)]
            got = [numbering.take_one("s", "m", targets[0])]
        assert got == [expected[r] for r in targets]
        for r in targets:
            expected[r] += 1
    top = max(expected.values())
    for r in ranks:  # single calls bring every rank to the same next number...
        while expected[r] < top:
            assert numbering.take_one("s", "m", r) == expected[r]
            expected[r] += 1
    assert numbering.take("s", "m", ranks, whole=True) == ((top, 8),)
    assert numbering._streams[("s", "m")][1] == {}  # ...so the next whole cast drops offsets
    assert numbering.take("s", "m", ranks, whole=True) == ((top + 1, 8),)


def _expand(runs: tuple) -> list[int]:
    return [value for value, count in runs for _ in range(count)]


def test_reorder_releases_in_sequence_whatever_the_arrival_order():
    out: list[int] = []
    reorder = Reorder(out.append)
    order = list(range(100))
    random.Random(4).shuffle(order)
    for seq in order:
        reorder.push(("s", "m"), seq, seq)
    assert out == list(range(100)) and reorder.held_count() == 0


def test_streams_are_independent():
    out: list[str] = []
    reorder = Reorder(out.append)
    reorder.push("a", 1, "a1")
    reorder.push("b", 0, "b0")
    reorder.push("a", 0, "a0")
    assert out == ["b0", "a0", "a1"]


def test_release_gaps_after_a_death_and_late_arrivals():
    out: list[int] = []
    reorder = Reorder(out.append)
    reorder.push("s", 2, 2)
    reorder.push("s", 4, 4)
    assert out == [] and reorder.held_count() == 2
    reorder.release_gaps()
    assert out == [2, 4]
    reorder.push("s", 5, 5)
    reorder.push("s", 0, 0)  # lost-and-found: delivered, counted as late
    assert out == [2, 4, 5, 0] and reorder.late == 1


def test_a_replayed_number_is_dropped_and_counted_never_run_twice():
    out: list[str] = []
    reorder = Reorder(out.append)
    for seq in range(3):
        reorder.push("s", seq, f"m{seq}")
    reorder.push("s", 1, "replay of m1")  # delivered already
    reorder.push("s", 5, "m5")
    reorder.push("s", 5, "replay of m5")  # held already
    assert out == ["m0", "m1", "m2"] and reorder.duplicates == 2
    reorder.release_gaps()  # 3 and 4 are skipped: arriving later, they are late, not replays
    reorder.push("s", 3, "m3")
    reorder.push("s", 3, "m3 again")
    assert out == ["m0", "m1", "m2", "m5", "m3"] and reorder.late == 1
    assert reorder.duplicates == 3


def test_held_messages_are_bounded(monkeypatch):
    from monarch._runtime import _ordering

    monkeypatch.setattr(_ordering, "MAX_HELD", 3)
    reorder = Reorder(lambda item: None)
    for seq in range(1, 10):  # 0 never comes: a sender far ahead of its turn, or a forger
        reorder.push("s", seq, seq)
    assert reorder.held_count() == 3 and reorder.overflow == 6
