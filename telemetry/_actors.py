"""What the store knows of each actor beyond spans and logs: its newest status (handlers
running now, messages waiting), its handled messages (flight-recorder entries) and the
changes in its life (status events, stalls included).

Flight-recorder entries travel and are kept as *groups*, one per actor and shipment:
``[actor, mesh_name, rank, source, entries]`` with each entry ``[method, sender, start_ns,
end_ns, outcome, nbytes]`` (see `message_group`). Taking a group costs the same whatever its
size, so a mesh of many busy actors does not make the controller pay per message handled;
entries become `MessageRecord`s (or table rows) only when asked for, and a malformed entry is
skipped then.

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
        self.messages = MessageLog(max_messages)
        self.events: deque[StatusEvent] = deque(maxlen=max_events)
        self.journals: dict[str, Any] | None = None  # the store's, once it follows
        self._stalled: dict[str, set[tuple[str, int]]] = {}  # actor -> (method, start)

    def ingest(self, statuses: list[ActorStatus], groups: list[MessageGroup]) -> None:
        """Takes a process's newest statuses and handled messages (groups)."""
        for status in statuses:
            self._set_status(status)
        if groups:
            self.messages.extend(groups)
            if self.journals is not None:
                self.journals["message"].extend(groups)

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


MessageGroup = tuple[str, str, int, str, "list[Any] | tuple[Any, ...]"]
"""(actor, mesh_name, rank, source, entries): handled messages of one actor, as shipped."""


def message_group(actor: str, mesh_name: str, rank: int, entries: list[Any],
                  source: str = "") -> list[Any]:
    """The wire form of one actor's handled messages: each entry is ``(method, sender,
    start_ns, end_ns, outcome, nbytes)``; ``source`` empty: the shipping process."""
    return [actor, mesh_name, rank, source, entries]


def read_message_groups(groups: Any, source: str) -> tuple[list[MessageGroup], int]:
    """(groups read, how many were not) of a batch's flight-recorder item; only the groups'
    heads are checked here (their entries are checked when read, see `message_records`)."""
    if not isinstance(groups, (list, tuple)):
        return [], 1
    good, bad = [], 0
    for group in groups:
        if (isinstance(group, (list, tuple)) and len(group) >= 5 and type(group[0]) is str
                and type(group[1]) is str and type(group[2]) is int
                and type(group[3]) is str and isinstance(group[4], (list, tuple))):
            good.append((group[0], group[1], group[2], group[3] or source, _as_tuples(group[4])))
        else:
            bad += 1
    return good, bad


def _as_tuples(entries: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    """The entries as tuples (one C-level pass, no check): the garbage collector stops
    tracking a tuple of strings and ints at its first collection, never a list, and the
    controller keeps ~100k entries whose every full collection walked them all (and whose
    arrival triggered those collections). Entries that are not sequences stay as they came
    (read, and skipped, by `message_rows`)."""
    try:
        return tuple(map(tuple, entries))
    except TypeError:
        return entries


def message_rows(groups: Any) -> list[tuple[Any, ...]]:
    """(actor, mesh_name, rank, method, sender, start_ns, end_ns, outcome, nbytes, source) of
    every well-formed entry of `groups`, in order."""
    rows = []
    for actor, name, rank, source, entries in groups:
        for entry in entries:
            try:
                method, sender, start, end, outcome, nbytes = entry[:6]
                if not (type(method) is str and type(outcome) is str and type(start) is int
                        and type(end) is int):
                    continue
                rows.append((actor, name, rank, method, str(sender), start, end, outcome,
                             nbytes if type(nbytes) is int else 0, source))
            except (TypeError, ValueError):  # not a sequence of six
                continue
    return rows


def message_records(groups: Any) -> list[MessageRecord]:
    """The `MessageRecord`s of every well-formed entry of `groups`, in order."""
    return [MessageRecord(*row) for row in message_rows(groups)]


class MessageLog:
    """Handled messages by group, the newest ``max_messages`` entries kept (at least; whole
    groups are dropped, oldest first)."""

    def __init__(self, max_messages: int) -> None:
        self._groups: deque[MessageGroup] = deque()
        self._max = max_messages
        self._count = 0

    def extend(self, groups: list[MessageGroup]) -> None:
        """Appends groups, dropping the oldest beyond the bound."""
        for group in groups:
            self._groups.append(group)
            self._count += len(group[4])
        while len(self._groups) > 1 and self._count - len(self._groups[0][4]) >= self._max:
            self._count -= len(self._groups.popleft()[4])

    def groups(self, actor: str | None = None) -> list[MessageGroup]:
        """The groups kept (of one actor, if given), oldest first."""
        if actor is None:
            return list(self._groups)
        return [g for g in self._groups if g[0] == actor]

    def __len__(self) -> int:
        return self._count
