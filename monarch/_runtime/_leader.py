"""Leader/followers: which thread polls the process's inbox right now.

At most one thread leads (holds the baton) at a time. A thread that would otherwise sleep — an
idle sync actor waiting for its next message, or a user thread blocked in `Future.get()` —
leads, so the message it waits for is handled on its own thread without a hand-off (a thread
wake costs ~40 µs here, and a woken thread then competes for the GIL).

A leader that stops polling (its own message arrived, its future settled) hands the baton to
the first follower waiting, or else *parks* it, waking nobody: the next thread that wants to
lead takes a parked baton at once. The I/O thread checks every `PARK_CHECK_S` and takes over a
baton parked for longer than that, so a long handler stalls the inbox for a few ms at most.
After `QUIET_CHECKS` checks in a row that saw no park, it sleeps (an idle proc, or one whose
actors keep the baton among themselves, wakes it ~330 times a second for nothing); the next
park wakes it (`WATCH`), so a parked baton always has it watching.

Invariant: the baton is held (by `_holder`), queued as BATON to the follower it was handed to,
or parked (`_holder is None`, and then the I/O thread is not asleep). Every transition, the
BATON's put included, happens under `_lock`, so a follower that gives up (`cancel`) finds the
baton in its queue or already taken by it, never on its way: it gives up without waiting, even
when a signal's exception came between its `get` of the BATON and its lead.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, Callable

BATON = object()
"""Queued to a follower: it is now the leader."""

DONE = object()
"""Queued to a waiting thread: what it waited for has happened."""

WATCH = object()
"""Queued to the sleeping I/O thread: the baton was parked; check on it again."""

PARK_CHECK_S = 0.003
"""How often the I/O thread, when not leading, looks for a baton parked too long."""

QUIET_CHECKS = 10
"""Checks in a row without a park after which the I/O thread sleeps until the next park."""


class Leadership:
    """The baton of one process's inbox."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        # Followers that asked to lead, in order; guarded by _lock.
        self._wanted: collections.deque[queue.SimpleQueue[Any]] = collections.deque()
        self.io_queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # The queue of the leader (or of the follower the baton travels to); None when parked.
        self._holder: queue.SimpleQueue[Any] | None = self.io_queue
        self._parked_at = 0.0
        self._parks = 0  # baton parks so far; guarded by _lock
        self._parks_seen = 0  # ... as of the I/O thread's last check
        self._quiet = 0  # the I/O thread's checks in a row that saw no park
        self.io_asleep = False
        """The I/O thread waits without a timeout: a park must wake it. Written under _lock;
        the I/O thread reads it without (a stale read costs one more turn of its loop)."""
        self.leader_ident: int | None = None
        """Thread ident of the thread inside the loop right now."""
        self.closing = False

    def holder_polls(self) -> bool:
        """True when some thread holds the baton (it polls, or is about to): what another
        thread leaves for the loop must wake it."""
        return self._holder is not None

    def wanted(self) -> bool:
        """True when some follower waits to lead (the I/O thread then yields)."""
        return bool(self._wanted)

    def want(self, me: queue.SimpleQueue[Any]) -> bool:
        """Asks to lead. Returns True if `me` took a parked baton (lead now); otherwise BATON
        will arrive on `me` (the I/O thread, if it leads, is woken to yield)."""
        with self._lock:
            if self._holder is None and not self.closing:
                self._holder = me
                return True
            self._wanted.append(me)
            io_leads = self._holder is self.io_queue
        if io_leads:
            self._wake()
        return False

    def cancel(self, me: queue.SimpleQueue[Any], stash: collections.deque[Any] | None) -> None:
        """Withdraws a `want`, at any point after it: the baton, if handed to `me` (queued, or
        already taken from `me` and not yet led with — a signal's exception can land between
        the two), is passed on. What `me` queued besides BATON and DONE moves, in order, to
        `stash`. Never waits."""
        with self._lock:
            try:
                self._wanted.remove(me)
                return
            except ValueError:
                pass
            holds = self._holder is me  # BATON is queued to `me` under this lock, or was taken
            while True:
                try:
                    item = me.get_nowait()
                except queue.Empty:
                    break
                if stash is not None and item is not BATON and item is not DONE:
                    stash.append(item)
        if holds:
            self.release(me)

    def release(self, me: queue.SimpleQueue[Any]) -> bool:
        """The leader `me` stops leading: the baton goes to the first follower waiting, or is
        parked (to the I/O thread once closing). Returns True if `me` still holds it."""
        watch = False
        with self._lock:
            if self.closing:
                nxt: queue.SimpleQueue[Any] | None = self.io_queue
            elif self._wanted:
                nxt = self._wanted.popleft()
            elif me is self.io_queue:
                return True  # the follower it yielded to gave up: nobody else wants it
            else:
                nxt = None
                self._parked_at = time.monotonic()
                self._parks += 1
                watch, self.io_asleep = self.io_asleep, False
            self._holder = nxt
            if nxt is not None and nxt is not me:
                nxt.put(BATON)  # under the lock: see `cancel`
                return False
        if nxt is None:
            if watch:
                self.io_queue.put(WATCH)
            return False
        return True

    def take_if_parked(self, me: queue.SimpleQueue[Any], min_age: float) -> bool:
        """Takes a baton parked for at least `min_age` seconds (or any, when closing). The I/O
        thread's periodic check: after `QUIET_CHECKS` in a row that saw no park, `io_asleep`
        is set (the I/O thread then waits for `WATCH` or the baton, without a timeout)."""
        with self._lock:
            if self._holder is None and (
                    self.closing or time.monotonic() - self._parked_at >= min_age):
                self._holder = me
                return True
            if self._holder is None or self._parks != self._parks_seen:
                self._parks_seen = self._parks
                self._quiet = 0
            else:
                self._quiet += 1
                if self._quiet >= QUIET_CHECKS and me is self.io_queue and not self.closing:
                    self.io_asleep = True
                    self._quiet = 0
            return False
