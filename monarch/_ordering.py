"""FIFO per (sender, destination actor), whatever path a message takes.

The sender numbers every message for each destination actor before fan-out (`Numbering`); the
receiving process releases messages of each (sender, actor) stream in number order
(`Reorder`). A cast and a direct call from the same sender thus stay in order even though the
cast went through a tree of forwarding procs and the direct call did not.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Iterable


class Numbering:
    """Sender side: the next sequence number of each (sender, mesh, rank) stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (sender, mesh, rank) -> next number to hand out; guarded by _lock.
        self._next: dict[tuple[str, str, int], int] = {}

    def take(self, sender: str, mesh: str, ranks: Iterable[int]) -> list[int]:
        """Allocates one number per rank, in order; call only once the message will be sent."""
        with self._lock:
            nxt = self._next
            out = []
            for rank in ranks:
                key = (sender, mesh, rank)
                seq = nxt.get(key, 0)
                nxt[key] = seq + 1
                out.append(seq)
            return out

    def take_one(self, sender: str, mesh: str, rank: int) -> int:
        """Allocates the number of a single message to one actor."""
        key = (sender, mesh, rank)
        with self._lock:
            seq = self._next.get(key, 0)
            self._next[key] = seq + 1
            return seq


class Reorder:
    """Receiver side: holds messages that arrive ahead of their turn. I/O thread only."""

    def __init__(self, deliver: Callable[[Any], None]) -> None:
        self._deliver = deliver
        self._expected: dict[Hashable, int] = {}
        # stream -> {seq: item} for items that arrived early.
        self._held: dict[Hashable, dict[int, Any]] = {}
        self.late = 0
        """Messages that arrived after a gap was released (delivered, out of order)."""

    def push(self, stream: Hashable, seq: int, item: Any) -> None:
        """Delivers `item` now if it is next in `stream`, with any held successors; else holds."""
        expected = self._expected.get(stream, 0)
        if seq == expected:
            self._deliver(item)
            expected += 1
            held = self._held.get(stream)
            if held:
                while expected in held:
                    self._deliver(held.pop(expected))
                    expected += 1
                if not held:
                    del self._held[stream]
            self._expected[stream] = expected
        elif seq > expected:
            self._held.setdefault(stream, {})[seq] = item
        else:
            self.late += 1
            self._deliver(item)

    def held_count(self) -> int:
        """How many messages wait for a predecessor."""
        return sum(len(h) for h in self._held.values())

    def release_gaps(self) -> None:
        """Delivers every held message, skipping missing numbers.

        Called when a proc died: a message lost with a dead forwarder would otherwise hold its
        stream forever.
        """
        for stream, held in list(self._held.items()):
            for seq in sorted(held):
                self._deliver(held[seq])
                self._expected[stream] = seq + 1
        self._held.clear()

    def forget(self, predicate: Callable[[Hashable], bool]) -> None:
        """Drops the state of streams matching `predicate` (e.g. of a stopped actor)."""
        for stream in [s for s in self._expected if predicate(s)]:
            del self._expected[stream]
        for stream in [s for s in self._held if predicate(s)]:
            del self._held[stream]
