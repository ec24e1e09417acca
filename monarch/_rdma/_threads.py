"""The threads transfers run on: daemon workers, started on demand, kept while idle.

Daemon, so that a transfer stuck on a dead peer never holds the interpreter's exit (its own
deadline ends it anyway).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

MAX_THREADS = 16


class Workers:
    """A small on-demand pool."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._max = max_threads
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # workers waiting for work and not yet promised an item

    def submit(self, fn: Callable[[], None]) -> None:
        """Runs `fn()` on a worker (it must not raise: it settles its own future)."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                start = False
            else:
                start = self._threads < self._max
                self._threads += start
        self._queue.put(fn)
        if start:
            threading.Thread(target=self._work, name="monarch-rdma-transfer",
                             daemon=True).start()

    def _work(self) -> None:
        while True:
            self._queue.get()()
            with self._lock:
                self._idle += 1
