"""The store's metric series: the latest point of each, bounded, also indexed by name."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ._records import MetricPoint


class Series:
    """The latest point of each metric series (a process's name and labels), oldest updated
    first; past `limit` series, a new one replaces the longest silent. Not thread-safe: the
    store's lock guards it.

    Beside the series, an index by metric name: `points(names)` (the admin API's top line, twice a
    second under `monarch top`) reads those few series, not every one of the job's."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._all: dict[tuple[Any, ...], MetricPoint] = {}
        self._named: dict[str, dict[tuple[Any, ...], MetricPoint]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def add(self, point: MetricPoint, pid: Any) -> bool:
        """Keeps `point` as its series' latest; True when a silent series was evicted for it."""
        key = (point.source, pid, point.name, tuple(sorted(point.labels.items())))
        evicted = False
        if self._all.pop(key, None) is None and len(self._all) >= self.limit:
            oldest = next(iter(self._all))
            del self._all[oldest]
            named = self._named[oldest[2]]
            del named[oldest]
            if not named:
                del self._named[oldest[2]]
            evicted = True
        self._all[key] = point
        self._named.setdefault(point.name, {})[key] = point
        return evicted

    def points(self, names: Collection[str] | None = None) -> list[MetricPoint]:
        """Every series' latest point, or those of the metrics `names`."""
        if names is None:
            return list(self._all.values())
        return [p for name in names for p in self._named.get(name, {}).values()]
