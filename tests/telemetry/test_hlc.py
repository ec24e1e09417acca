from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st
from monarch.telemetry import HybridClock, hlc_counter, hlc_wall_ns, now, observe
from monarch.telemetry._hlc import COUNTER_BITS

WALL = st.integers(min_value=0, max_value=2**62)
OPS = st.lists(st.one_of(st.tuples(st.just("now"), WALL),
                         st.tuples(st.just("observe"), st.integers(0, 2**63 - 1))),
               max_size=60)


class FakeWall:
    def __init__(self) -> None:
        self.value = 0

    def __call__(self) -> int:
        return self.value


@given(OPS)
def test_stamps_increase_and_pass_every_observed_stamp(ops: list[tuple[str, int]]) -> None:
    wall = FakeWall()
    clock = HybridClock(wall)
    highest = 0  # the greatest stamp issued or observed so far
    for op, value in ops:
        if op == "observe":
            clock.observe(value)
            highest = max(highest, value)
        else:
            wall.value = value  # the wall clock may step back
            stamp = clock.now()
            assert stamp > highest
            highest = stamp


@given(WALL)
def test_stamp_follows_wall_clock_when_it_is_ahead(wall_ns: int) -> None:
    wall = FakeWall()
    wall.value = wall_ns
    stamp = HybridClock(wall).now()
    assert hlc_wall_ns(stamp) == wall_ns >> COUNTER_BITS << COUNTER_BITS
    assert abs(stamp - wall_ns) < 2**COUNTER_BITS + 1


def test_counter_advances_within_one_physical_tick() -> None:
    wall = FakeWall()
    wall.value = 5 << COUNTER_BITS
    clock = HybridClock(wall)
    stamps = [clock.now() for _ in range(3)]
    assert [hlc_counter(s) for s in stamps] == [0, 1, 2]
    assert {hlc_wall_ns(s) for s in stamps} == {5 << COUNTER_BITS}


def test_process_clock_passes_observed_remote_stamp() -> None:
    remote = now() + 10**12  # a sender whose clock runs a second ahead
    observe(remote)
    assert now() > remote


def test_threads_never_get_the_same_stamp() -> None:
    clock = HybridClock()
    results: list[list[int]] = [[] for _ in range(4)]

    def stamp(out: list[int]) -> None:
        out.extend(clock.now() for _ in range(2000))

    threads = [threading.Thread(target=stamp, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [s for out in results for s in out]
    assert len(set(every)) == len(every)
    assert all(out == sorted(out) for out in results)
