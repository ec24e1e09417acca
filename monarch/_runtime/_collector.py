"""Pausing the garbage collector while a burst of short-lived containers is built.

The admin API's topology answer at 1,024 actors is ~10,000 dicts and lists alive together
for ~20 ms (the metric index, the rows, the changed-since diff), then freed by reference
counting once encoded: nothing in it is cyclic. Built with the collector running, they crossed
its young threshold several times per answer, so every answer paid for collections that walked
them (and promoted the job's own in-flight objects early, which brought the full passes over
the whole controller, ~200 ms each at that size, half as often again). `paused()` holds the
collector off for the length of such a section, on any thread; the collection that follows
sees only what outlived it.

Only CPU-bound sections may pause it (never one that waits on a socket or another thread):
the pause is process-wide.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0  # by _lock: sections paused now
_resume = False  # by _lock: whether the collector ran when the first of them began


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off until the last of the sections paused at once ends; on again then
    only if it was on when the first began (a script's own `gc.disable()` stands)."""
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()
