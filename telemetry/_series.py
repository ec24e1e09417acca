"""The store's metric series: the latest point of each, bounded, also indexed by name."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ._invocations import Invocations
from ._records import MetricPoint


class Series:
    """The latest point of each metric series (a process's name and labels), oldest updated
    first; past `limit` series, a new one replaces the longest silent. Not thread-safe: the
    store's lock guards it.

    Beside the series, an index by metric name: `points(names)` (the admin API's top line, twice a
    second under `monarch top`) reads those few series, not every one of the job's.

    The invocation metrics are not shipped as points: `derive` adds up the procs' per-site
    tallies (`monarch.telemetry._invocations`, bounded by the same `limit`), and `points`
    reads them with the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._all: dict[tuple[Any, ...], MetricPoint] = {}
        self._named: dict[str, dict[tuple[Any, ...], MetricPoint]] = {}
        self.invocations = Invocations(limit)
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._all) + len(self.invocations)

    @property
    def evicted(self) -> int:
        """Series evicted so far (the longest silent, to make room)."""
        return self._evicted + self.invocations.evicted

    def derive(self, source: str, pid: Any, wire: list[Any]) -> int:
        """Adds up the invocation metrics of a batch ``wire`` list from ``source`` (its
        sites' tallies); returns how many tallies did not read."""
        return self.invocations.add(source, pid, wire[7], wire[12] if len(wire) > 12 else [])[1]

    def derived_points(self, source: str, pid: Any, sites: Any) -> list[MetricPoint]:
        """The invocation points a batch of ``sites`` from ``source`` changed (for live
        subscribers)."""
        return self.invocations.points_of(self.invocations.changed(source, pid, sites))

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
            self._evicted += 1
        self._all[key] = point
        self._named.setdefault(point.name, {})[key] = point
        return evicted

    def points(self, names: Collection[str] | None = None) -> list[MetricPoint]:
        """Every series' latest point, or those of the metrics `names`."""
        derived = self.invocations.points(names)
        if names is None:
            return [*self._all.values(), *derived]
        return [p for name in names for p in self._named.get(name, {}).values()] + derived
