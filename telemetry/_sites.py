"""Site spans: the runtime's per-invocation and per-call spans, in a compact form.

Many spans share their name and most attributes: every invocation of one actor's endpoint
(mesh, actor class, rank, method), every call of one endpoint on one mesh. A `SpanSite` holds
what they share and is made once; each span then records only its ids, times, outcome and one
per-span value (an invocation's bytes in). The invocation hot path is a tuple, a deque append and
the trace context, without a lock; the tuple holds only atoms (the site by id), so the garbage
collector soon stops tracking it. The invocation metrics (``messages_handled``,
``handler_latency_seconds``, ``message_bytes{received}``) are tallied per site when the
recorder drains the spans (`Tallies`: a count, a sum, bytes and bucket counts a site, in C), or
at once when the buffer is full and the span is dropped; the tallies travel with the spans and
the controller's store adds them up (`monarch.telemetry._invocations`).

The hot path lives in `monarch.telemetry._spans` (`begin_invocation`, `start_site_span`). A
batch carries each site it uses once and the spans as columns (see `drain_site_spans`); the
controller reads them with `monarch.telemetry._columns`.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import threading
from collections import deque
from typing import Any

from ._metrics import LATENCY_BOUNDS



class SpanSite:
    """What many spans share: their name and attributes, and the key of their per-span value.

    Sites are made once and live as long as the process (spans waiting to be shipped name
    them by `id`): get them from `invocation_site` / `call_site`, which make each only once.

    Args:
        name: the spans' name, e.g. ``trainer.step``.
        attributes: the shared attributes; never mutated once the site exists.
        value_key: the attribute each span's own value goes to (e.g. ``bytes_in``), or None.
        counted: (mesh, method) for invocation sites, whose spans feed the invocation metrics.
    """

    __slots__ = ("attributes", "counted", "id", "name", "value_key")

    def __init__(self, name: str, attributes: dict[str, Any], value_key: str | None = None,
                 counted: tuple[str, str] | None = None) -> None:
        self.name = name
        self.attributes = attributes
        self.value_key = value_key
        self.counted = counted
        with _lock:
            self.id = len(_by_id)
            _by_id.append(self)

    def to_wire(self) -> list[Any]:
        """Returns ``[name, attributes, value_key, counted]``, the site's form in a batch
        (``counted``: ``[mesh, method]`` of an invocation site, else None)."""
        counted = self.counted
        return [self.name, self.attributes, self.value_key,
                None if counted is None else list(counted)]


# Every site by id. Pending spans hold the id, not the site: a tuple of ints, bytes and strs is
# one the garbage collector stops tracking (at its first pass), so pending spans cost it nothing.
_by_id: list[SpanSite] = []
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread


os.register_at_fork(after_in_child=_after_fork_in_child)
_invocation_sites: dict[tuple[Any, ...], SpanSite] = {}
_call_sites: dict[tuple[Any, ...], SpanSite] = {}


def site_by_id(site_id: int) -> SpanSite:
    """Returns the site with this `SpanSite.id`."""
    return _by_id[site_id]


def invocation_site(mesh: str, actor_class: str, rank: Any, method: str) -> SpanSite:
    """Returns the site of one actor's endpoint (made once): span ``<mesh>.<method>`` with
    attributes mesh, actor_class, rank, method, and each span's ``bytes_in``."""
    key = (mesh, actor_class, rank, method)
    site = _invocation_sites.get(key)
    if site is None:
        attributes = {"mesh": mesh, "actor_class": actor_class, "rank": rank, "method": method}
        site = _invocation_sites.setdefault(
            key, SpanSite(f"{mesh}.{method}", attributes, "bytes_in", (mesh, method)))
    return site


def call_site(mesh: str, method: str, adverb: str,
              target: tuple[str, str, str] | None = None) -> SpanSite:
    """Returns the site of a caller's span ``call <mesh>.<method>`` made with ``adverb`` (call,
    call_one, broadcast, ...); made once. ``target``: (mesh id, sender actor, the view cast
    to as JSON), kept as the attributes ``mesh_id``, ``sender`` and ``view``."""
    key = (mesh, method, adverb, target)
    site = _call_sites.get(key)
    if site is None:
        attributes = {"mesh": mesh, "method": method, "adverb": adverb}
        if target is not None:
            attributes.update(zip(("mesh_id", "sender", "view"), target))
        site = _call_sites.setdefault(key, SpanSite(f"call {mesh}.{method}", attributes))
    return site


def drain_site_spans(queue: deque[Any], n: int,
                     tallies: Tallies) -> tuple[list[Any], list[Any], list[Any]]:
    """Takes up to ``n`` ended site spans (one drainer at a time), tallies them into
    ``tallies`` (with the dropped ones there) and takes those; returns (sites, columns,
    tallies) in batch wire form.

    The columns are ``[site indices, trace ids (16 bytes each, joined), span ids (8 bytes
    each, joined), parent span ids (8 bytes each, zeros for none), start_ns list, end_ns list,
    outcome names, outcome indices, values]``; the work is done in C (zip, map, join).
    """
    items = list(map(operator.call, itertools.repeat(queue.popleft, min(n, len(queue)))))
    if not items:
        sites: list[Any] = []
        return sites, [], tallies.take(sites, {})
    site_ids, traces, spans, parents, starts, values, ends, outcomes = zip(*items)
    tallies.add_spans(site_ids, starts, ends, values)
    ids = list(dict.fromkeys(site_ids))
    indices = list(map({site_id: i for i, site_id in enumerate(ids)}.__getitem__, site_ids))
    names = list(dict.fromkeys(outcomes))
    outcome_indices = list(map({name: i for i, name in enumerate(names)}.__getitem__, outcomes))
    sites = [_by_id[site_id].to_wire() for site_id in ids]
    tallied = tallies.take(sites, {s: i for i, s in enumerate(ids)})
    return sites, [
        indices, b"".join(traces), b"".join(spans), b"".join([p or _NO_PARENT for p in parents]),
        list(starts), list(ends), names, outcome_indices, list(values)], tallied


_NO_PARENT = bytes(8)


def total_bytes(values: Any) -> int:
    """The byte count of spans' values (a value that is not an int counts nothing)."""
    try:
        return sum(filter(None, values))
    except TypeError:  # not byte counts: the spans keep them, the byte counter does not
        return sum(v for v in values if type(v) is int)


def latency_buckets(durations_ns: Any, bounds_ns: list[int]) -> list[int]:
    """How many of ``durations_ns`` fall in each bucket: bucket i is (bound i-1, bound i], the
    last one past every bound (as `MetricsTable.observe` counts them)."""
    ordered = sorted(durations_ns)
    below = [bisect.bisect_right(ordered, bound) for bound in bounds_ns]
    below.append(len(ordered))
    return [b - a for a, b in zip([0, *below], below)]


class Tallies:
    """Per invocation site, what its spans count: ``[count, sum of durations (ns), bytes in,
    bucket counts, newest end (ns)]``, shipped with the spans (batch item 12); the controller
    adds them up into the invocation metrics (`monarch.telemetry._invocations`). The drainer
    tallies the spans it takes (`add_spans`: per site, in C); a span the full buffer dropped
    is tallied at once (`add`, any thread), so it still counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_site: dict[int, list[Any]] = {}

    def add(self, item: tuple[Any, ...]) -> None:
        """Tallies one dropped site span (`Recorder.add_site_span`'s item)."""
        site_id, _, _, _, start, value, end, _ = item
        if _by_id[site_id].counted is None:
            return
        duration = end - start
        buckets = [0] * (len(_BOUNDS_NS) + 1)
        buckets[bisect.bisect_left(_BOUNDS_NS, duration)] = 1
        self._merge(site_id, 1, duration, total_bytes([value]), buckets, end)

    def add_spans(self, site_ids: tuple[int, ...], starts: tuple[int, ...],
                  ends: tuple[int, ...], values: tuple[Any, ...]) -> None:
        """Tallies drained site spans (columns), per invocation site. Several sites: the spans
        are ordered by site once (in C) and each site's run is cut from that order (a busy proc
        of 16 actors drains ~16 sites at once: picking each site's spans from all of them was
        O(spans x sites))."""
        durations = list(map(operator.sub, ends, starts))
        distinct = dict.fromkeys(site_ids)
        if len(distinct) == 1:
            (site_id,) = distinct
            self._add_run(site_id, durations, ends, values)
            return
        order = sorted(range(len(site_ids)), key=site_ids.__getitem__)
        ordered = operator.itemgetter(*order)(site_ids)  # two or more: a tuple
        for site_id in distinct:
            run = order[bisect.bisect_left(ordered, site_id):bisect.bisect_right(ordered, site_id)]
            pick = operator.itemgetter(*run) if len(run) > 1 else lambda c, i=run[0]: (c[i],)
            self._add_run(site_id, list(pick(durations)), pick(ends), pick(values))

    def _add_run(self, site_id: int, durations: list[int], ends: Any, values: Any) -> None:
        if _by_id[site_id].counted is None:
            return
        self._merge(site_id, len(durations), sum(durations), total_bytes(values),
                    latency_buckets(durations, _BOUNDS_NS), max(ends))

    def _merge(self, site_id: int, count: int, total_ns: int, nbytes: int,
               buckets: list[int], newest: int) -> None:
        with self._lock:
            tally = self._by_site.get(site_id)
            if tally is None:
                self._by_site[site_id] = [count, total_ns, nbytes, buckets, newest]
                return
            tally[0] += count
            tally[1] += total_ns
            tally[2] += nbytes
            tally[3] = list(map(operator.add, tally[3], buckets))
            tally[4] = max(tally[4], newest)

    def take(self, sites: list[Any], known: dict[int, int]) -> list[Any]:
        """The tallies in batch wire form, ``[[site index, count, sum_ns, bytes, buckets,
        newest_ns], ...]``, emptied; a site not yet in ``sites`` (the batch's, indexed by
        ``known``: site id -> index) is appended to it."""
        if not self._by_site:
            return []
        with self._lock:
            taken, self._by_site = self._by_site, {}
        wire = []
        for site_id, tally in taken.items():
            at = known.get(site_id)
            if at is None:
                at = known[site_id] = len(sites)
                sites.append(_by_id[site_id].to_wire())
            wire.append([at, *tally])
        return wire


_BOUNDS_NS = [round(b * 1e9) for b in LATENCY_BOUNDS]