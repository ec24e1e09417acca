"""This process's hybrid logical clock, stamped on every envelope.

A stamp is one int: nanoseconds of wall time, bumped past the last stamp given out and past
every stamp received, so a line caused by a message never sorts before the line that sent it.
"""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_last = 0


def now() -> int:
    """A stamp greater than every stamp given out or observed so far in this process."""
    global _last
    wall = time.time_ns()
    with _lock:
        _last = wall if wall > _last else _last + 1
        return _last


def observe(remote: int) -> None:
    """Advances the clock past a stamp received in a message."""
    global _last
    if remote > _last:
        with _lock:
            if remote > _last:
                _last = remote
