"""The buffers a process owns, and who is using them right now.

A transfer pins its entry; `drop` removes the entry at once (later lookups fail) but the
memory is only let go when the last pin is released, so a transfer never touches freed memory.
"""

from __future__ import annotations

import itertools
import threading

from ._errors import BufferDroppedError
from ._memory import Memory


class Entry:
    """A registered buffer. `pins` and `memory` are guarded by the registry's lock."""

    __slots__ = ("buffer_id", "dropped", "memory", "pins")

    def __init__(self, buffer_id: int, memory: Memory) -> None:
        self.buffer_id = buffer_id
        self.memory: Memory | None = memory  # None once dropped and unpinned
        self.pins = 0
        self.dropped = False


class Registry:
    """Buffer id -> Entry for this process's data server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, Entry] = {}
        self._ids = itertools.count(1)
        self._last_id = 0  # ids below or at it that are missing were dropped

    def add(self, memory: Memory) -> int:
        """Registers memory; returns its id."""
        with self._lock:
            buffer_id = self._last_id = next(self._ids)
            self._entries[buffer_id] = Entry(buffer_id, memory)
        return buffer_id

    def pin(self, buffer_id: int) -> tuple[Entry, Memory]:
        """Marks a transfer on the buffer; raises BufferDroppedError if it is gone."""
        with self._lock:
            entry = self._entries.get(buffer_id)
            if entry is None or entry.memory is None:
                why = "was dropped" if 0 < buffer_id <= self._last_id else "is unknown here"
                raise BufferDroppedError(f"RDMABuffer #{buffer_id} {why}")
            entry.pins += 1
            return entry, entry.memory

    def unpin(self, entry: Entry) -> None:
        """Ends a transfer; lets a dropped buffer's memory go with the last pin."""
        with self._lock:
            entry.pins -= 1
            if entry.dropped and entry.pins == 0:
                entry.memory = None

    def drop(self, buffer_id: int) -> bool:
        """Forgets the buffer (idempotent); returns False if it was not registered."""
        with self._lock:
            entry = self._entries.pop(buffer_id, None)
            if entry is None:
                return False
            entry.dropped = True
            if entry.pins == 0:
                entry.memory = None
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def pinned(self) -> int:
        """Transfers in progress on this process's buffers."""
        with self._lock:
            return sum(entry.pins for entry in self._entries.values())
