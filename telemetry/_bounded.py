"""A bounded log of items in arrival order: the oldest go first, once the records the items
hold pass a count or their estimated bytes pass a budget (`monarch.telemetry._budget`).

An item may hold many records (a chunk of spans, a group of flight-recorder entries), so the
count is of records, not items. The newest item always stays, however large. `Journal` adds
absolute positions for a follower that reads in steps. Not thread-safe: the store calls both
under its lock.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _one(_: Any) -> int:
    return 1


class Bounded(Generic[T]):
    """Items, the oldest evicted beyond ``max_records`` records or ``max_bytes`` bytes.

    Args:
        max_records: records kept at most (the items' `records_of` summed).
        max_bytes: estimated bytes kept at most (the items' `size_of` summed).
        size_of: an item's estimated bytes.
        records_of: how many records an item holds (default: one).
    """

    def __init__(self, max_records: int, max_bytes: int, size_of: Callable[[T], int],
                 records_of: Callable[[T], int] = _one) -> None:
        # Three deques, not one of (item, records, bytes) tuples: such a tuple holds the item,
        # so the garbage collector tracks one per item (~20,000 at 1,024 busy actors); a deque
        # of ints is one object.
        self._items: deque[T] = deque()
        self._counts: deque[int] = deque()
        self._sizes: deque[int] = deque()
        self.max_records, self.max_bytes = max_records, max_bytes
        self._size_of, self._records_of = size_of, records_of
        self.records = 0
        """Records held now."""
        self.bytes = 0
        """Estimated bytes held now."""
        self.evicted = 0
        """Records evicted so far."""

    def extend(self, items: Iterable[T]) -> int:
        """Appends items, evicting the oldest beyond the bounds; returns the records evicted."""
        size_of, records_of = self._size_of, self._records_of
        held, counts, sizes = self._items, self._counts, self._sizes
        for item in items:
            n, size = records_of(item), size_of(item)
            held.append(item)
            counts.append(n)
            sizes.append(size)
            self.records += n
            self.bytes += size
        return self._evict()

    def append(self, item: T) -> int:
        """Appends one item (see `extend`)."""
        return self.extend((item,))

    def _evict(self) -> int:
        evicted = 0
        held = self._items
        while len(held) > 1 and (self.records > self.max_records or self.bytes > self.max_bytes):
            evicted += self._popleft()
        self.evicted += evicted
        return evicted

    def _popleft(self) -> int:
        self._items.popleft()
        n = self._counts.popleft()
        self.records -= n
        self.bytes -= self._sizes.popleft()
        return n

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def newest(self, n: int) -> list[T]:
        """The newest ``n`` items, oldest first."""
        start = max(len(self._items) - n, 0)
        return list(itertools.islice(self._items, start, None))


class Journal(Bounded[T]):
    """What was added to the store in arrival order, for one follower that reads it in steps
    (the controller's Parquet writer), each item at an absolute position.

    The follower keeps a cursor (the position after what it read); `since` returns what came
    after it, and `release` frees what it has written. Unreleased items count against the
    bounds: a follower that falls behind loses the oldest (counted in `lost`), the job never
    waits for it.
    """

    def __init__(self, max_records: int, max_bytes: int, size_of: Callable[[T], int],
                 records_of: Callable[[T], int] = _one,
                 behind: threading.Event | None = None, hurry: float = 1.0) -> None:
        super().__init__(max_records, max_bytes, size_of, records_of)
        self._base = 0  # position of the oldest item held
        self.lost = 0
        """Records evicted before they were released (never written)."""
        self._behind = behind
        self._hurry_bytes = int(max_bytes * hurry)

    def extend(self, items: Iterable[T]) -> int:
        """Appends items (see `Bounded.extend`); past ``hurry`` of its bytes, sets ``behind``:
        the follower wakes now, not at its next look."""
        evicted = super().extend(items)
        if self._behind is not None and self.bytes >= self._hurry_bytes:
            self._behind.set()
        return evicted

    @property
    def end(self) -> int:
        """The position after the newest item (a cursor that has read everything)."""
        return self._base + len(self._items)

    def _evict(self) -> int:
        held, evicted = self._items, 0
        while held and (self.records > self.max_records or self.bytes > self.max_bytes):
            evicted += self._popleft()
            self._base += 1
        self.evicted += evicted
        self.lost += evicted
        return evicted

    def since(self, cursor: int) -> tuple[list[T], int, int]:
        """(items after ``cursor``, the new cursor, how many items were lost before them)."""
        start = max(cursor - self._base, 0)
        missed = max(self._base - cursor, 0)
        items = list(itertools.islice(self._items, start, None))
        return items, self.end, missed

    def release(self, cursor: int) -> None:
        """Frees every item before ``cursor`` (the follower has written them)."""
        while self._items and self._base < cursor:
            self._popleft()
            self._base += 1
