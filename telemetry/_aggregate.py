"""Pure aggregations over stored records: metrics across processes, transfer throughput."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TypeVar

from ._records import MetricPoint, TransferRecord

_SUMMED = ("counter", "updown", "histogram")
_K = TypeVar("_K")


def aggregate_metrics(points: Iterable[MetricPoint]) -> list[MetricPoint]:
    """Merges each process's latest points into one series per (name, labels).

    Counters, up-down counters and histograms (with equal bounds) are summed over processes;
    gauges stay per process, with the process as label ``proc``.
    """
    merged: dict[tuple[object, ...], MetricPoint] = {}
    for point in points:
        if point.kind in _SUMMED:
            point = dataclasses.replace(point, source="")
        else:
            point = dataclasses.replace(point, labels={**point.labels, "proc": point.source})
        key = (point.name, point.kind, tuple(sorted(point.labels.items())), point.bounds)
        previous = merged.get(key)
        merged[key] = point if previous is None else _sum(previous, point)
    return sorted(merged.values(), key=lambda p: (p.name, sorted(p.labels.items())))


def _sum(a: MetricPoint, b: MetricPoint) -> MetricPoint:
    buckets = tuple(x + y for x, y in zip(a.buckets, b.buckets))
    return dataclasses.replace(a, value=a.value + b.value, count=a.count + b.count,
                               buckets=buckets, time_ns=max(a.time_ns, b.time_ns))


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """Throughput over a window: total bytes, transfer count, and bytes per second."""

    nbytes: int
    count: int
    bytes_per_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class TransferSummary:
    """Throughput per link (src, dst) and per mesh over the last ``window`` seconds."""

    window: float
    links: dict[tuple[str, str], Rate]
    meshes: dict[str, Rate]
    kinds: dict[str, Rate]

    @property
    def total(self) -> Rate:
        """All links together."""
        nbytes = sum(r.nbytes for r in self.links.values())
        count = sum(r.count for r in self.links.values())
        return Rate(nbytes, count, nbytes / self.window if self.window else 0.0)


def summarize_transfers(records: Iterable[TransferRecord], window: float,
                        now_ns: int) -> TransferSummary:
    """Sums the transfers that ended in ``(now_ns - window, now_ns]`` per link, mesh and kind."""
    since = now_ns - int(window * 1e9)
    links: dict[tuple[str, str], list[int]] = {}
    meshes: dict[str, list[int]] = {}
    kinds: dict[str, list[int]] = {}
    for record in records:
        if since < record.time_ns <= now_ns:
            _add(links, (record.src, record.dst), record.nbytes)
            _add(meshes, record.mesh or "", record.nbytes)
            _add(kinds, record.kind, record.nbytes)
    return TransferSummary(window, _rates(links, window), _rates(meshes, window),
                           _rates(kinds, window))


def _add(table: dict[_K, list[int]], key: _K, nbytes: int) -> None:
    totals = table.setdefault(key, [0, 0])
    totals[0] += nbytes
    totals[1] += 1


def _rates(table: dict[_K, list[int]], window: float) -> dict[_K, Rate]:
    return {key: Rate(n, c, n / window if window else 0.0) for key, (n, c) in table.items()}
