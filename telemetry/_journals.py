"""What the store received, in arrival order, for the one follower that writes it elsewhere
(the controller's Parquet history): a `Journal` per kind, bounded by bytes.

The follower reads in steps (`since`, a cursor per kind) and releases what it has written
(`release`). What it has not released counts against the journals' share of the store's
budget, split per kind (`SHARES`): a follower that falls behind loses the oldest (counted in
`lost`), the job never waits for it; a journal past ``hurry`` of its share sets `behind`, so the
follower writes at once rather than at its next look. Thread-safe, under the store's lock.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from ._bounded import Journal
from ._budget import SIZE_OF, records_in

KINDS = ("span", "log", "transfer", "failure", "message", "status_event")
"""Kinds the journals follow (a span item is a chunk, a message item a group)."""
SHARES = {"span": 0.4, "message": 0.3, "log": 0.2, "transfer": 0.04, "failure": 0.03,
          "status_event": 0.03}
"""Each journal's share of the journals' bytes."""


class Journals:
    """One journal per kind of `KINDS`, ``max_bytes`` for all (see `SHARES`)."""

    def __init__(self, lock: threading.RLock, max_bytes: int,
                 max_records: int = 10_000_000, hurry: float = 1.0) -> None:
        self._lock = lock
        self.behind = threading.Event()
        """Set when a journal passes ``hurry`` of its share (the follower clears it)."""
        self.by_kind: dict[str, Journal[Any]] = {
            kind: Journal(max_records, int(max_bytes * SHARES[kind]), SIZE_OF[kind],
                          functools.partial(records_in, kind), self.behind, hurry)
            for kind in KINDS}
        """The journals (the store appends to them under its lock)."""

    def since(self, kind: str, cursor: int) -> tuple[list[Any], int, int]:
        """What was added of ``kind`` after ``cursor``, the new cursor and how many items were
        lost to the bound before them."""
        with self._lock:
            return self.by_kind[kind].since(cursor)

    def release(self, kind: str, cursor: int) -> None:
        """Frees the journal of ``kind`` up to ``cursor``: the follower has written it."""
        with self._lock:
            self.by_kind[kind].release(cursor)

    @property
    def lost(self) -> int:
        """Records dropped before the follower released them."""
        with self._lock:
            return sum(j.lost for j in self.by_kind.values())

    @property
    def bytes(self) -> int:
        """Estimated bytes held."""
        with self._lock:
            return sum(j.bytes for j in self.by_kind.values())

    def fill(self) -> float:
        """How full the fullest journal is (0: empty, 1: at its bound)."""
        with self._lock:
            return max((j.bytes / j.max_bytes for j in self.by_kind.values() if j.max_bytes),
                       default=0.0)
