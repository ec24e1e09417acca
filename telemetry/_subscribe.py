"""Live subscriptions to a store: a bounded queue per subscriber, drop-and-count when slow."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Self

ALL_KINDS = frozenset({"span", "log", "metric", "transfer", "failure"})


class Subscription:
    """Records of some kinds, as the store ingests them.

    A subscriber that falls more than ``maxsize`` records behind loses the newest ones; `dropped`
    says how many. Never blocks the store.
    """

    def __init__(self, kinds: Iterable[str], maxsize: int,
                 notify: Callable[[], None] | None = None,
                 on_close: Callable[[Subscription], None] | None = None) -> None:
        self.kinds = frozenset(kinds)
        unknown = self.kinds - ALL_KINDS
        if unknown:
            raise ValueError(f"unknown record kinds {sorted(unknown)}; known: {sorted(ALL_KINDS)}")
        self._maxsize = maxsize
        self._notify = notify
        self._on_close = on_close
        self._queue: deque[Any] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._dropped = 0  # guarded by _ready
        self.closed = False

    @property
    def dropped(self) -> int:
        """Records lost because this subscriber was too slow."""
        return self._dropped

    def offer(self, records: list[Any]) -> None:
        """Queues ``records`` (called by the store); drops what does not fit."""
        with self._ready:
            room = self._maxsize - len(self._queue)
            self._queue.extend(records[:max(room, 0)])
            self._dropped += max(len(records) - max(room, 0), 0)
            self._ready.notify_all()
        if self._notify is not None:
            try:
                self._notify()
            except Exception:  # a broken consumer callback must not fail the ingest
                self.close()

    def poll(self, max_items: int = 10_000) -> list[Any]:
        """Returns up to ``max_items`` queued records (maybe none, never waits), oldest first."""
        with self._ready:
            return self._take(max_items)

    def wait(self, timeout: float | None = None, max_items: int = 10_000) -> list[Any]:
        """Waits until records are queued (or ``timeout`` s pass, or it closes); returns up to
        ``max_items`` of them (none after a timeout or close), oldest first."""
        with self._ready:
            self._ready.wait_for(lambda: self._queue or self.closed, timeout)
            return self._take(max_items)

    def close(self) -> None:
        """Stops the subscription; a blocked `wait` returns."""
        with self._ready:
            self.closed = True
            self._ready.notify_all()
        if self._on_close is not None:
            self._on_close(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _take(self, n: int) -> list[Any]:
        queue = self._queue
        return [queue.popleft() for _ in range(min(n, len(queue)))]
