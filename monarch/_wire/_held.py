"""Calls a thread sends in a burst travel together: held per destination, sent as one Batch.

A script that calls several meshes and then waits (`futures = [m.step.call() for m in
meshes]`, then `.get()` each) sends its calls one after the other to the same first hop of the
cast tree, which would wake for each, forward each to its children, and wake each of them as
often. Held, they leave as one `Batch` per destination when the thread waits (or sends
anything else, or holds `MAX_HELD` for one destination): one wake and one forward per hop for
the whole burst. `ProcessRuntime.cast` holds the calls of threads outside any actor and
asyncio loop (`hold=True`); what holds them is released by the first of:

- any wait on a future in the process (`ProcessRuntime.wait_for`), and any other message sent
  through the outbox (so nothing a thread sends overtakes the calls it held before);
- the loop, once the first of them was held `HOLD_S` ago: its leader looks before and after
  each poll, and polls for at most a millisecond while calls are held. A thread that holds
  the first call wakes the leader if one polls (it may be in a long poll); if the baton is
  parked, the I/O thread takes it over within `_leader.PARK_CHECK_S` and polls: a call nobody
  waits for leaves within a few milliseconds. The loop does not send them at once: a leader
  that polls on another thread (an idle actor's, the I/O thread) would otherwise split the
  holder's burst into the calls it happened to hold when the leader woke;
- `MAX_HELD` calls held for one destination, and the runtime's close.

Order per sender and actor does not depend on it (calls carry their sequence numbers); order
with the thread's other messages does, hence the release on any send.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ._messages import Call, call_or_batch
from ._signals import holding

MAX_HELD = 64
"""Calls held for one destination before they are sent without waiting for more."""

HOLD_S = 0.001
"""How long the loop leaves held calls to their thread (which sends them when it waits)
before it sends them itself."""


class HeldCalls:
    """The calls held per destination address (any thread)."""

    def __init__(self, send: Callable[[str, Any, list[Any], bool], None],
                 after: Callable[[], None] | None = None) -> None:
        self._send = send
        """Sends one message now, bypassing the held calls."""
        self._after = after
        """Runs after each release, without the lock (what could not be sent is reported
        there: reporting fails futures, whose callbacks may hold calls again)."""
        self.by_address: dict[str, list[tuple[Call, list[Any]]]] = {}
        """Destination address -> (Call, frames) of each call held for it, in order."""
        self.since = 0.0
        """When the first of the calls held now was held (`time.monotonic`)."""
        self.lock = threading.Lock()
        """Held while calls are added or sent: a thread that finds it taken waits for the
        release (`Outbox.send_raw`), so its own message cannot overtake its held calls."""

    def hold(self, address: str, call: Call, frames: list[Any]) -> bool:
        """Holds one call; returns True when nothing was held before (the caller makes sure a
        release will come). Holding `MAX_HELD` for one address sends them at once."""
        with self.lock:
            first = not self.by_address
            if first:
                self.since = time.monotonic()
            held = self.by_address.get(address)
            if held is None:
                self.by_address[address] = [(call, frames)]
                return first
            held.append((call, frames))
            if len(held) < MAX_HELD:
                return first
        self.release(block=True)
        return first

    def due(self) -> bool:
        """True when the calls held now were held long enough for the loop to send them."""
        return time.monotonic() - self.since >= HOLD_S

    def release_first(self, block: bool) -> None:
        """Called before a thread sends or waits: what is held leaves now, and a release under
        way on another thread is waited for (`block`), so nothing overtakes the held calls."""
        if self.by_address or self.lock.locked():
            self.release(block)

    def release(self, block: bool) -> None:
        """Sends every held call: one `Call`, or one `Batch` per destination. `block=False` is
        the loop's: it never waits (another thread releasing sends them)."""
        if not holding(self.lock, block, lambda: self._send_held(block)):
            return
        if self._after is not None:
            self._after()

    def _send_held(self, block: bool) -> None:
        """Sends what is held, one destination at a time (the caller holds the lock). Each
        leaves `by_address` once sent: a KeyboardInterrupt during a send leaves its calls
        held, sent again with the next release (their numbers make a replay harmless), never
        lost (a lost call leaves a gap that holds its actors' stream forever)."""
        by_address = self.by_address
        while by_address:
            address = next(iter(by_address))
            msg, frames = call_or_batch(by_address[address])
            try:
                self._send(address, msg, frames, block)
            except Exception:
                del by_address[address]  # as a send's own error: not sent again
                raise
            del by_address[address]
