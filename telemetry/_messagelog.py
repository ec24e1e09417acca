"""The store's flight records: handled messages kept by group (one per actor and shipment),
bounded, with each actor's groups also kept apart."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._bounded import Bounded
from ._budget import DEFAULT, group_bytes

if TYPE_CHECKING:
    from ._actors import MessageGroup
else:
    MessageGroup = Any


class MessageLog(Bounded[MessageGroup]):
    """Handled messages by group, the newest kept within ``max_messages`` entries and
    ``max_bytes`` (whole groups are dropped, oldest first; the newest always stays).

    Each actor's groups are also kept apart, in order: `monarch top` asks for one actor's
    flight recorder at every poll, and finding them among all groups (tens of thousands at
    1,024 busy actors, under the store's lock) was most of that request (~10 ms)."""

    def __init__(self, max_messages: int, max_bytes: int = DEFAULT.of("message")) -> None:
        super().__init__(max_messages, max_bytes, group_bytes, _entries_in)
        self._by_actor: dict[str, deque[MessageGroup]] = {}

    def extend(self, items: Iterable[MessageGroup]) -> int:
        items = list(items)
        by_actor = self._by_actor
        for group in items:
            found = by_actor.get(group[0])
            if found is None:
                found = by_actor[group[0]] = deque()
            found.append(group)
        return super().extend(items)

    def _popleft(self) -> int:
        actor = self._items[0][0]
        evicted = super()._popleft()
        found = self._by_actor.get(actor)
        if found:
            found.popleft()  # the oldest group of all is its actor's oldest
            if not found:
                del self._by_actor[actor]
        return evicted

    def groups(self, actor: str | None = None) -> list[MessageGroup]:
        """The groups kept (of one actor, if given), oldest first."""
        if actor is None:
            return list(self)
        return list(self._by_actor.get(actor, ()))

    def newest_entries(self, actor: str | None, limit: int) -> list[MessageGroup]:
        """`groups`, the oldest cut so that they hold ``limit`` entries at most."""
        kept: list[MessageGroup] = []
        taken = 0
        for group in reversed(self.groups(actor)):
            if taken >= limit:
                break
            kept.append(group)
            taken += len(group[4])
        if taken > limit:
            kept[-1] = (*kept[-1][:4], kept[-1][4][taken - limit:])  # type: ignore[assignment]
        kept.reverse()
        return kept

    def __len__(self) -> int:
        return self.records


def _entries_in(group: MessageGroup) -> int:
    return len(group[4])
