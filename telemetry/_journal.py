"""What was added to the store, in arrival order, for a follower that reads it in steps (the
controller's Parquet writer): a bounded deque with absolute positions.

A follower keeps a cursor (the position after what it read); `since` returns what came after
it and how much was lost to the bound meanwhile. Not thread-safe: the store calls it under its
lock.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from typing import Any


class Journal:
    """Items in arrival order, the newest ``maxlen`` kept, each at an absolute position."""

    def __init__(self, maxlen: int) -> None:
        self._items: deque[Any] = deque()
        self._maxlen = maxlen
        self._base = 0  # position of _items[0]

    @property
    def end(self) -> int:
        """The position after the newest item (a cursor that has read everything)."""
        return self._base + len(self._items)

    def extend(self, items: Iterable[Any]) -> None:
        """Appends items, dropping the oldest beyond the bound."""
        self._items.extend(items)
        excess = len(self._items) - self._maxlen
        for _ in range(max(excess, 0)):
            self._items.popleft()
        self._base += max(excess, 0)

    def append_one(self, item: Any) -> None:
        """Appends one item."""
        self.extend((item,))

    def since(self, cursor: int) -> tuple[list[Any], int, int]:
        """Returns (items after ``cursor``, the new cursor, how many were lost before them)."""
        start = max(cursor - self._base, 0)
        missed = max(self._base - cursor, 0)
        items = list(itertools.islice(self._items, start, None))
        return items, self.end, missed
