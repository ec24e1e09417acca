"""The invocation metrics, as the controller's store adds them up from the procs' tallies.

``messages_handled{mesh, method}``, ``handler_latency_seconds{mesh, method}`` and
``message_bytes{direction="received"}`` say nothing a proc's invocation spans do not. A proc
tallies the spans of each invocation site as it drains them (`monarch.telemetry._sites.Tallies`:
count, sum of durations, bytes in, bucket counts, newest end; a span its full buffer drops is
tallied too) and ships the tallies with the spans, a few integers a site; the store adds them
here. Before, each proc kept the series as a `MetricsTable` and shipped two `MetricPoint`s per
site and drain, each with its help text and bucket bounds (at 1,024 actors ~45 % of a batch's
bytes), and the controller decoded and keyed each point (~300 us a batch of 16 sites, against
~80 us for 16 tallies). The per-span work stays in the procs, in C: the controller does none.

The series keep cumulative values, as the proc's counters did (from zero at the proc's start;
a proc restarted under the same name has a new pid, hence new series). A `MetricPoint` is made
for a series only when one is read, and kept until the series changes again: a job nobody
watches builds none.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable
from typing import Any

from ._metrics import BUILTIN, LATENCY_BOUNDS
from ._records import MetricPoint

HANDLED, LATENCY, RECEIVED = "messages_handled", "handler_latency_seconds", "message_bytes"
NAMES = frozenset({HANDLED, LATENCY, RECEIVED})
_HELP = {spec.name: spec.description for spec in BUILTIN}
_NBUCKETS = len(LATENCY_BOUNDS) + 1
_RECEIVED_LABELS = {"direction": "received"}
_INTS = frozenset({int})
_FOUR_INTS = (int, int, int, int)

Key = tuple[Any, ...]
"""A site's series: (source, pid, mesh, method); a process's bytes in: (source, pid)."""


class Invocations:
    """The invocation series of every process, bounded: past ``limit`` series (a site's two
    count as one), the longest silent goes. Not thread-safe: the store's lock guards it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # a site's key -> [count, sum_ns, buckets, time_ns]; a process's -> [bytes, time_ns];
        # in the order they were last updated (the longest silent first)
        self._series: dict[Key, list[Any]] = {}
        self._size = 0  # series held: two a site, one a process
        self._built: dict[tuple[str, Key], MetricPoint] = {}  # (name, key) -> point
        self.evicted = 0
        """Series evicted so far."""

    def __len__(self) -> int:
        return self._size

    def add(self, source: str, pid: Any, sites: Any, tallies: Any) -> tuple[int, int]:
        """Adds a batch's tallies (its ``sites`` item says which are invocation sites);
        returns (tallies read, tallies that did not)."""
        if not isinstance(tallies, (list, tuple)):
            return 0, 1
        if not tallies:
            return 0, 0
        counted = counted_sites(sites)
        good = bad = nbytes = newest = 0
        series_of, built, add = self._series, self._built, operator.add
        for tally in tallies:
            try:
                at, count, total_ns, nbytes_in, buckets = tally[:5]
                end = tally[5] if len(tally) > 5 else 0
                site = counted[at]
                if (site is None or (type(count), type(total_ns), type(nbytes_in), type(end))
                        != _FOUR_INTS or count <= 0 or len(buckets) != _NBUCKETS
                        or not _INTS.issuperset(map(type, buckets)) or min(buckets) < 0):
                    raise ValueError(tally)
            except (TypeError, ValueError, IndexError):
                bad += 1
                continue
            good += 1
            key = (source, pid, *site)
            series = series_of.pop(key, None) or self._new(key, [0, 0, [0] * _NBUCKETS, 0])
            series[0] += count
            series[1] += total_ns
            series[2] = list(map(add, series[2], buckets))
            if end > series[3]:
                series[3] = end
            series_of[key] = series  # last: the dict is longest silent first
            if built:
                built.pop((HANDLED, key), None)
                built.pop((LATENCY, key), None)
            nbytes += nbytes_in
            if end > newest:
                newest = end
        if good:
            self._bytes(source, pid, nbytes, newest)
        return good, bad

    def points(self, names: Collection[str] | None = None) -> list[MetricPoint]:
        """The latest point of every series (of the metrics ``names`` only, when given)."""
        wanted = NAMES if names is None else NAMES.intersection(names)
        out: list[MetricPoint] = []
        if not wanted:
            return out
        sites = [key for key in self._series if len(key) == 4]
        if HANDLED in wanted:
            out += [self._point(HANDLED, key) for key in sites]
        if LATENCY in wanted:
            out += [self._point(LATENCY, key) for key in sites]
        if RECEIVED in wanted:
            out += [self._point(RECEIVED, key) for key in self._series if len(key) == 2]
        return out

    def points_of(self, keys: Iterable[Key]) -> list[MetricPoint]:
        """The points of these series (site keys give two, process keys one)."""
        out = []
        for key in keys:
            if key not in self._series:
                continue
            if len(key) == 4:
                out += [self._point(HANDLED, key), self._point(LATENCY, key)]
            else:
                out.append(self._point(RECEIVED, key))
        return out

    def changed(self, source: str, pid: Any, sites: Any) -> list[Key]:
        """The keys a batch of ``sites`` from ``source`` touched (for live subscribers)."""
        keys: list[Key] = [(source, pid, *c) for c in dict.fromkeys(counted_sites(sites)) if c]
        return [*keys, (source, pid)] if keys else []

    # -- internals -----------------------------------------------------------------------------

    def _bytes(self, source: str, pid: Any, nbytes: int, time_ns: int) -> None:
        key = (source, pid)
        series = self._series.pop(key, None) or self._new(key, [0, 0])
        series[0] += nbytes
        series[1] = max(series[1], time_ns)
        self._series[key] = series
        if self._built:
            self._built.pop((RECEIVED, key), None)

    def _new(self, key: Key, series: list[Any]) -> list[Any]:
        """A new series of ``key``, room made for it: past `limit`, the longest silent go."""
        size = 2 if len(key) == 4 else 1
        while self._series and self._size + size > self.limit:
            oldest = next(iter(self._series))
            del self._series[oldest]
            for name in (HANDLED, LATENCY) if len(oldest) == 4 else (RECEIVED,):
                self._built.pop((name, oldest), None)
            gone = 2 if len(oldest) == 4 else 1
            self._size -= gone
            self.evicted += gone
        self._size += size
        return series

    def _point(self, name: str, key: Key) -> MetricPoint:
        point = self._built.get((name, key))
        if point is not None:
            return point
        source = key[0]
        if name == RECEIVED:
            nbytes, time_ns = self._series[key]
            point = MetricPoint(RECEIVED, "counter", dict(_RECEIVED_LABELS), nbytes, time_ns,
                                source, description=_HELP[RECEIVED])
        else:
            count, total_ns, buckets, time_ns = self._series[key]
            labels = {"mesh": key[2], "method": key[3]}
            if name == HANDLED:
                point = MetricPoint(HANDLED, "counter", labels, count, time_ns, source,
                                    description=_HELP[HANDLED])
            else:
                point = MetricPoint(LATENCY, "histogram", labels, total_ns / 1e9, time_ns,
                                    source, count, LATENCY_BOUNDS, tuple(buckets),
                                    _HELP[LATENCY])
        self._built[(name, key)] = point
        return point


def counted_sites(sites: Any) -> list[tuple[str, str] | None]:
    """Each site of a batch's ``sites`` item: (mesh, method) for an invocation site, else
    None (a call site, or a site that does not read)."""
    if not isinstance(sites, (list, tuple)):
        return []
    out: list[tuple[str, str] | None] = []
    for site in sites:
        try:
            mesh, method = site[3]
        except (TypeError, ValueError, IndexError, KeyError):
            out.append(None)
            continue
        out.append((mesh, method) if type(mesh) is str and type(method) is str else None)
    return out
