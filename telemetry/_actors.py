"""What the store knows of each actor beyond spans and logs: its newest status (handlers
running now, messages waiting), its handled messages (flight-recorder entries) and the
changes in its life (status events, stalls included).

A handler is *stalled* once it has run longer than a threshold (`check_stalls`, called about
once a second by the controller): a ``stalled`` event the first time, a ``resumed`` event when
a later status no longer lists it. Not thread-safe: the store calls it under its lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import Any

from ._records import ActorStatus, MessageRecord, StatusEvent


class ActorBook:
    """Statuses by actor, handled messages and status events, bounded."""

    def __init__(self, max_messages: int, max_events: int) -> None:
        self.statuses: dict[str, ActorStatus] = {}
        self.messages: deque[MessageRecord] = deque(maxlen=max_messages)
        self.events: deque[StatusEvent] = deque(maxlen=max_events)
        self.journals: dict[str, Any] | None = None  # the store's, once it follows
        self._stalled: dict[str, set[tuple[str, int]]] = {}  # actor -> (method, start)

    def ingest(self, statuses: list[ActorStatus], messages: list[MessageRecord]) -> None:
        """Takes a process's newest statuses and handled messages."""
        for status in statuses:
            self._set_status(status)
        self.messages.extend(messages)
        if self.journals is not None and messages:
            self.journals["message"].extend(messages)

    def event(self, event: StatusEvent) -> None:
        """Records one status event."""
        self.events.append(event)
        if self.journals is not None:
            self.journals["status_event"].append_one(event)

    def stalled_now(self, threshold_s: float, now_ns: int | None = None
                    ) -> list[tuple[ActorStatus, Any]]:
        """(status, handler) of every handler running longer than ``threshold_s``."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        limit = now_ns - int(threshold_s * 1e9)
        return [(status, handler) for status in self.statuses.values()
                if status.state == "running"
                for handler in status.running if handler.start_ns <= limit]

    def check_stalls(self, threshold_s: float, now_ns: int | None = None) -> int:
        """Adds a ``stalled`` event for each handler newly past ``threshold_s``; returns how
        many handlers are stalled now."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        stalled = self.stalled_now(threshold_s, now_ns)
        for status, handler in stalled:
            seen = self._stalled.setdefault(status.actor, set())
            if (handler.method, handler.start_ns) not in seen:
                seen.add((handler.method, handler.start_ns))
                self.event(StatusEvent(now_ns, status.actor, status.mesh_name, status.rank,
                                       "stalled", handler.method, status.source))
        return len(stalled)

    def _set_status(self, status: ActorStatus) -> None:
        previous = self.statuses.get(status.actor)
        self.statuses[status.actor] = status
        if previous is None or previous.state != status.state:
            self.event(StatusEvent(status.time_ns, status.actor, status.mesh_name, status.rank,
                                   status.state, "", status.source))
        stalled = self._stalled.get(status.actor)
        if stalled:
            now = {(h.method, h.start_ns) for h in status.running}
            for method, start in sorted(stalled - now, key=lambda m: m[1]):
                stalled.discard((method, start))
                self.event(StatusEvent(status.time_ns, status.actor, status.mesh_name,
                                       status.rank, "resumed", method, status.source))


def read_entries(cls: Any, entries: Any, source: str) -> tuple[list[Any], int]:
    """(records read, how many entries were not) of a batch's statuses or messages."""
    if not isinstance(entries, (list, tuple)):
        return [], 1
    good, bad = [], 0
    for entry in entries:
        try:
            record = cls.from_wire(entry)
        except Exception:  # a malformed entry must not poison the rest
            bad += 1
            continue
        good.append(record if record.source else dataclasses.replace(record, source=source))
    return good, bad
