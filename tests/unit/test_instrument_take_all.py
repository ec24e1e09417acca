"""The actor sampler empties each actor's lifecycle events while the final flush may sample
from another thread: four threads emptying one deque take every event exactly once, and none
raises (a 1,024-actor bench once saw `IndexError: pop from an empty deque` in the loop)."""

from __future__ import annotations

import collections
import threading

from monarch._runtime._instrument import _take_all


def test_threads_emptying_one_deque_take_each_event_once() -> None:
    events = collections.deque(range(200_000))
    taken: list[list[int]] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            taken.append(_take_all(events))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    flat = [e for part in taken for e in part]
    assert sorted(flat) == list(range(200_000))
    assert _take_all(collections.deque()) == []
    assert _take_all(collections.deque(range(5)), 3) == [0, 1, 2]  # at most that many
