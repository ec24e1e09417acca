"""Hybrid logical clock: wall-clock time plus a counter, packed into one int.

A stamp is ``(physical << COUNTER_BITS) | counter`` where ``physical`` is the wall time in units
of ``2**COUNTER_BITS`` ns (about a microsecond). Read as an int, a stamp is therefore close to
nanoseconds since the epoch (``hlc_wall_ns`` recovers the physical part), it fits msgpack's uint64
until the year 2554, and comparing two stamps as ints compares (physical, counter) pairs. A counter
overflow carries into the physical part, which only moves the clock ~1 µs ahead of wall time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

COUNTER_BITS = 10
_COUNTER_MASK = (1 << COUNTER_BITS) - 1
_PHYSICAL_MASK = ~_COUNTER_MASK


class HybridClock:
    """A process's hybrid logical clock.

    Invariants: every stamp returned by `now` is greater than every stamp returned before it by
    this clock and greater than every stamp passed to `observe` before it.
    """

    __slots__ = ("_last", "_lock", "_wall_ns")

    def __init__(self, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self._wall_ns = wall_ns
        self._lock = threading.Lock()
        self._last = 0  # the greatest stamp issued or observed; guarded by _lock

    def now(self) -> int:
        """Returns a new stamp, strictly greater than any issued or observed before."""
        physical = self._wall_ns() & _PHYSICAL_MASK
        with self._lock:  # `with`: a signal's exception cannot land between taking and trying
            last = self._last + 1
            stamp = self._last = physical if physical > last else last  # noqa: PLR1730 (speed)
        return stamp

    def observe(self, remote: int) -> None:
        """Advances the clock past ``remote``, a stamp received in a message."""
        if remote > self._last:  # a stamp behind this clock changes nothing: no lock
            with self._lock:
                if remote > self._last:
                    self._last = remote

    def reset_lock(self) -> None:
        """Replaces the lock; called in a forked child, where the parent's lock may be held."""
        self._lock = threading.Lock()

    def peek(self) -> int:
        """Returns the greatest stamp issued or observed so far (0 before any)."""
        return self._last


def hlc_wall_ns(stamp: int) -> int:
    """Returns the physical (wall-clock, ns since the epoch) part of a stamp."""
    return stamp & _PHYSICAL_MASK


def hlc_counter(stamp: int) -> int:
    """Returns the logical counter part of a stamp."""
    return stamp & _COUNTER_MASK


_clock = HybridClock()


def process_clock() -> HybridClock:
    """Returns this process's clock."""
    return _clock


def now() -> int:
    """Returns a new stamp from this process's clock (see `HybridClock.now`)."""
    return _clock.now()


def observe(remote: int) -> None:
    """Advances this process's clock past a stamp received in a message."""
    _clock.observe(remote)
