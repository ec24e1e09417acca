"""FIFO per (sender, destination actor), whatever path a message takes.

The sender numbers every message for each destination actor before fan-out (`Numbering`); the
receiving process releases messages of each (sender, actor) stream in number order
(`Reorder`). A cast and a direct call from the same sender thus stay in order even though the
cast went through a tree of forwarding procs and the direct call did not.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Hashable, Sequence

from .._wire._messages import Seqs


class Numbering:
    """Sender side: the next sequence number of each (sender, mesh, rank) stream.

    Kept per (sender, mesh) as a base plus a per-rank offset (rank r's next number is
    base + offset[r], a missing offset is 0): a cast to every actor of a mesh moves the base,
    which costs the same however many actors the mesh has; messages to some actors move their
    offsets.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (sender, mesh) -> [base, {rank: offset}]; guarded by _lock.
        self._streams: dict[tuple[str, str], list[Any]] = {}
        self.taken: dict[int, tuple] = {}
        """Thread ident -> the numbers (`Seqs` runs) it took for the message it sends now,
        until it is handed over (`ProcessRuntime.cast` pops them). A signal's exception on the
        main thread between the two would leave a gap that holds the actors' stream forever:
        the sender then sends the message anyway (a replay is dropped, never run twice).
        Recorded before the stream moves, and the stream moves idempotently (`_advance`)."""

    def take(self, sender: str, mesh: str, ranks: Sequence[int], whole: bool = False,
             ident: int | None = None) -> tuple[tuple[int, int], ...]:
        """Allocates one number per rank, in order, as `Seqs` runs; call only once the message
        will be sent. `whole`: `ranks` are every actor of the mesh (a cast to all of them).
        `ident`: the calling thread's (`taken` records them under it)."""
        if ident is None:
            ident = threading.get_ident()
        with self._lock:
            stream = self._streams.get((sender, mesh))
            if stream is None:
                stream = self._streams[(sender, mesh)] = [0, {}]
            base, offsets = stream
            if whole and not offsets:
                seqs: tuple = ((base, len(ranks)),)  # one number for all: no work per actor
                self.taken[ident] = seqs
                stream[0] = base + 1  # no signal check between these two stores
                return seqs
            values = [base + offsets.get(rank, 0) for rank in ranks]
            seqs = Seqs.encode(values)
            self.taken[ident] = seqs
            try:
                _advance(stream, base, ranks, values, whole)
            except BaseException:  # a signal's exception: the numbers are out, move past them
                _advance(stream, base, ranks, values, whole)
                raise
        return seqs

    def take_one(self, sender: str, mesh: str, rank: int, ident: int | None = None) -> int:
        """Allocates the number of a single message to one actor (see `take`)."""
        if ident is None:
            ident = threading.get_ident()
        with self._lock:
            stream = self._streams.get((sender, mesh))
            if stream is None:
                stream = self._streams[(sender, mesh)] = [0, {}]
            offsets = stream[1]
            offset = offsets.get(rank, 0)
            value = stream[0] + offset
            self.taken[ident] = ((value, 1),)
            offsets[rank] = offset + 1  # no signal check between these two stores
            return value


def _advance(stream: list[Any], base: int, ranks: Sequence[int], values: list[int],
             whole: bool) -> None:
    """Moves `stream` (its base was `base` when `values` were taken) past `values`; a second
    run changes nothing."""
    if whole:
        if stream[0] == base:
            if min(values) == max(values):  # the offsets caught up: drop them
                stream[:] = [values[0] + 1, {}]
            else:
                stream[0] = base + 1
        return
    offsets = stream[1]
    for rank, value in zip(ranks, values):
        if base + offsets.get(rank, 0) <= value:
            offsets[rank] = value - base + 1


MAX_HELD = 65_536
"""Messages held per stream waiting for a predecessor (a bound, not a flow control: one
sender's calls are numbered in send order and arrive nearly in it)."""
MAX_SKIPPED = 4096
"""Numbers remembered per stream as skipped by `Reorder.release_gaps`."""


class Reorder:
    """Receiver side: holds messages that arrive ahead of their turn. I/O thread only."""

    def __init__(self, deliver: Callable[[Any], None]) -> None:
        self._deliver = deliver
        self._expected: dict[Hashable, int] = {}
        # stream -> {seq: item} for items that arrived early.
        self._held: dict[Hashable, dict[int, Any]] = {}
        # stream -> numbers `release_gaps` skipped: one arriving later is late, not a replay
        self._skipped: dict[Hashable, set[int]] = {}
        self.late = 0
        """Messages that arrived after a gap was released (delivered, out of order)."""
        self.duplicates = 0
        """Messages whose number was delivered already (a replay): dropped."""
        self.overflow = 0
        """Messages too far ahead of their turn (past `MAX_HELD` held): dropped."""

    def push(self, stream: Hashable, seq: int, item: Any) -> None:
        """Delivers `item` now if it is next in `stream`, with any held successors; else holds
        it. A number delivered already is a replay: dropped and counted, never run twice."""
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
            held = self._held.setdefault(stream, {})
            if seq in held or len(held) >= MAX_HELD:
                self.duplicates += seq in held
                self.overflow += seq not in held
                return
            held[seq] = item
        elif seq in self._skipped.get(stream, ()):
            self._skipped[stream].discard(seq)
            self.late += 1
            self._deliver(item)
        else:
            self.duplicates += 1

    def held_count(self) -> int:
        """How many messages wait for a predecessor."""
        return sum(len(h) for h in self._held.values())

    def release_gaps(self) -> None:
        """Delivers every held message, skipping missing numbers.

        Called when a proc died: a message lost with a dead forwarder would otherwise hold its
        stream forever.
        """
        for stream, held in list(self._held.items()):
            skipped = self._skipped.setdefault(stream, set())
            for seq in sorted(held):
                expected = self._expected.get(stream, 0)
                skipped.update(itertools.islice(range(expected, seq),
                                                max(MAX_SKIPPED - len(skipped), 0)))
                self._deliver(held[seq])
                self._expected[stream] = seq + 1
        self._held.clear()

    def forget(self, predicate: Callable[[Hashable], bool]) -> None:
        """Drops the state of streams matching `predicate` (e.g. of a stopped actor)."""
        for stream in [s for s in self._expected if predicate(s)]:
            del self._expected[stream]
        for stream in [s for s in self._held if predicate(s)]:
            del self._held[stream]
        for stream in [s for s in self._skipped if predicate(s)]:
            del self._skipped[stream]
