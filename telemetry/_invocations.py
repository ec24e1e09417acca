"""The invocation metrics, derived by the controller's store from the site spans it takes in.

``messages_handled{mesh, method}``, ``handler_latency_seconds{mesh, method}`` and
``message_bytes{direction="received"}`` of a process say nothing its invocation spans do not:
each span has its site (mesh, method), its start and end, and its bytes in. So a proc ships
only the spans (and, for the spans its full buffer dropped, a tally per site:
`monarch.telemetry._sites.Tallies`), and the store counts them here as they arrive: per
batch and site, one pass in C over the span columns, then a few additions. The proc no longer
counts each drain into histograms, nor ships two points per site and drain, nor does the
controller decode them: at 1,024 actors that was 15-20 % of a round's CPU, on both sides.

The series keep cumulative values, as the proc's counters did (from zero at the proc's start;
a proc restarted under the same name has a new pid, hence new series). A `MetricPoint` is made
for a series only when one is read, and kept until the series changes again: a job nobody
watches builds none.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Collection, Iterable
from typing import Any

from ._columns import SiteSpanColumns
from ._metrics import BUILTIN, LATENCY_BOUNDS
from ._records import MetricPoint
from ._sites import latency_buckets, total_bytes

HANDLED, LATENCY, RECEIVED = "messages_handled", "handler_latency_seconds", "message_bytes"
NAMES = frozenset({HANDLED, LATENCY, RECEIVED})
_HELP = {spec.name: spec.description for spec in BUILTIN}
_BOUNDS_NS = [round(b * 1e9) for b in LATENCY_BOUNDS]
_NBUCKETS = len(LATENCY_BOUNDS) + 1
_bucket = functools.partial(bisect.bisect_left, _BOUNDS_NS)
"""A duration's bucket: i is (bound i-1, bound i], as `MetricsTable.observe` counts."""
_ONE_SITE = 16
"""Spans of a batch of one site from which they are bucketed per bound, not per span."""
_RECEIVED_LABELS = {"direction": "received"}

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

    def add(self, source: str, pid: Any, sites: Any, columns: SiteSpanColumns | None,
            tallies: Any = ()) -> tuple[int, int]:
        """Counts a batch's invocation spans (``columns``, read from its ``sites`` wire item)
        and the tallies of those its process dropped; returns (tallies read, tallies that
        did not)."""
        counted = counted_sites(sites)
        if not any(counted):
            return 0, len(tallies) if isinstance(tallies, (list, tuple)) else 1
        if columns is not None:
            self._add_columns(source, pid, counted, columns)
        return self._add_tallies(source, pid, counted, tallies)

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

    def _add_columns(self, source: str, pid: Any, counted: list[tuple[str, str] | None],
                     columns: SiteSpanColumns) -> None:
        """One pass in C for the durations and their buckets, then one short Python step a
        span into its site's series (a batch holds a few spans of each of many sites: cutting
        the columns per site cost more). A batch of one site (a busy actor alone in its
        proc) is counted in C alone: its durations sorted, bucketed per bound."""
        indices, ends = columns.site_indices, columns.ends
        distinct = dict.fromkeys(indices)
        series_of = {i: self._site_series((source, pid, *site))
                     for i in distinct if i < len(counted) and (site := counted[i]) is not None}
        if not series_of:
            return
        durations = list(map(operator.sub, ends, columns.starts))
        if len(distinct) == 1 and len(series_of) == 1 and len(durations) >= _ONE_SITE:
            self._add_one_site(source, pid, series_of[indices[0]], durations, ends,
                               columns.values)
            return
        buckets = list(map(_bucket, durations))
        if len(series_of) == len(distinct):  # every span is an invocation's (a proc's batch)
            for i, duration, bucket, end in zip(indices, durations, buckets, ends):
                series = series_of[i]
                series[0] += 1
                series[1] += duration
                series[2][bucket] += 1
                if end > series[3]:
                    series[3] = end
            self._bytes(source, pid, total_bytes(columns.values), max(ends))
            return
        nbytes = newest = 0
        get = series_of.get
        for i, duration, bucket, end, value in zip(indices, durations, buckets, ends,
                                                   columns.values):
            found = get(i)
            if found is None:
                continue
            series = found
            series[0] += 1
            series[1] += duration
            series[2][bucket] += 1
            if end > series[3]:
                series[3] = end
            newest = max(newest, end)
            if type(value) is int:
                nbytes += value
        self._bytes(source, pid, nbytes, newest)

    def _add_one_site(self, source: str, pid: Any, series: list[Any], durations: list[int],
                      ends: Any, values: Any) -> None:
        series[0] += len(durations)
        series[1] += sum(durations)
        series[2] = list(map(operator.add, series[2], latency_buckets(durations, _BOUNDS_NS)))
        series[3] = max(series[3], max(ends))
        self._bytes(source, pid, total_bytes(values), series[3])

    def _add_tallies(self, source: str, pid: Any, counted: list[tuple[str, str] | None],
                     tallies: Any) -> tuple[int, int]:
        if not isinstance(tallies, (list, tuple)):
            return 0, 1
        good = bad = 0
        for tally in tallies:
            try:
                at, count, total_ns, nbytes, buckets = tally
                site = counted[at]
                if not (site is not None and type(count) is int and count > 0
                        and type(total_ns) is int and type(nbytes) is int
                        and len(buckets) == _NBUCKETS
                        and all(type(b) is int and b >= 0 for b in buckets)):
                    raise ValueError(tally)
            except (TypeError, ValueError, IndexError):
                bad += 1
                continue
            good += 1
            self._count(source, pid, site, count, total_ns, list(buckets))
            self._bytes(source, pid, nbytes, 0)
        return good, bad

    def _count(self, source: str, pid: Any, site: tuple[str, str], count: int, total_ns: int,
               buckets: list[int]) -> None:
        series = self._site_series((source, pid, *site))
        series[0] += count
        series[1] += total_ns
        series[2] = list(map(operator.add, series[2], buckets))

    def _site_series(self, key: Key) -> list[Any]:
        """The series of a site, moved last (the dict is longest silent first), its points
        to be built again."""
        series = self._take(key, 2) or [0, 0, [0] * _NBUCKETS, 0]
        self._series[key] = series
        if self._built:
            self._built.pop((HANDLED, key), None)
            self._built.pop((LATENCY, key), None)
        return series

    def _bytes(self, source: str, pid: Any, nbytes: int, time_ns: int) -> None:
        key = (source, pid)
        series = self._take(key, 1) or [0, 0]
        series[0] += nbytes
        series[1] = max(series[1], time_ns)
        self._series[key] = series
        if self._built:
            self._built.pop((RECEIVED, key), None)

    def _take(self, key: Key, size: int) -> list[Any] | None:
        """Takes ``key``'s series out (it goes back in last), or makes room for a new one of
        ``size`` series."""
        series = self._series.pop(key, None)
        if series is not None:
            return series
        while self._series and self._size + size > self.limit:
            oldest = next(iter(self._series))
            del self._series[oldest]
            for name in (HANDLED, LATENCY) if len(oldest) == 4 else (RECEIVED,):
                self._built.pop((name, oldest), None)
            gone = 2 if len(oldest) == 4 else 1
            self._size -= gone
            self.evicted += gone
        self._size += size
        return None

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
