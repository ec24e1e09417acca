"""Site spans: the runtime's per-invocation and per-call spans, in a compact form.

Many spans share their name and most attributes: every invocation of one actor's endpoint
(mesh, actor class, rank, method), every call of one endpoint on one mesh. A `SpanSite` holds
what they share and is made once; each span then records only its ids, times, outcome and one
per-span value (an invocation's bytes in). The invocation hot path is a tuple, a deque append and
the trace context, without a lock; the tuple holds only atoms (the site by id), so the garbage
collector soon stops tracking it. The invocation metrics (``messages_handled``,
``handler_latency_seconds``, ``message_bytes{received}``) are derived from the spans when the
recorder drains them, or counted at once when the buffer is full and the span is dropped.

The hot path lives in `monarch.telemetry._spans` (`begin_invocation`, `start_site_span`). A
batch carries each site it uses once and the spans as columns (see `drain_site_spans`); the
controller reads them with `monarch.telemetry._columns`.
"""

from __future__ import annotations

import itertools
import operator
import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._metrics import MetricsTable


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
        """Returns ``[name, attributes, value_key]``, the site's form in a batch."""
        return [self.name, self.attributes, self.value_key]


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
                     metrics: MetricsTable) -> tuple[list[Any], list[Any]]:
    """Takes up to ``n`` ended site spans (one drainer at a time); returns (sites, columns) in
    batch wire form and adds the invocation metrics of the spans taken to ``metrics``.

    The columns are ``[site indices, trace ids (16 bytes each, joined), span ids (8 bytes
    each, joined), parent span ids (8 bytes each, zeros for none), start_ns list, end_ns list,
    outcome names, outcome indices, values]``; the work is done in C (zip, map, join).
    """
    items = list(map(operator.call, itertools.repeat(queue.popleft, min(n, len(queue)))))
    if not items:
        return [], []
    site_ids, traces, spans, parents, starts, values, ends, outcomes = zip(*items)
    ids = list(dict.fromkeys(site_ids))
    indices = list(map({site_id: i for i, site_id in enumerate(ids)}.__getitem__, site_ids))
    sites = [_by_id[site_id] for site_id in ids]
    names = list(dict.fromkeys(outcomes))
    outcome_indices = list(map({name: i for i, name in enumerate(names)}.__getitem__, outcomes))
    _count(sites, indices, starts, ends, values, metrics)
    return [site.to_wire() for site in sites], [
        indices, b"".join(traces), b"".join(spans), b"".join([p or _NO_PARENT for p in parents]),
        list(starts), list(ends), names, outcome_indices, list(values)]


_NO_PARENT = bytes(8)


def _count(sites: list[SpanSite], indices: list[int], starts: tuple[int, ...],
           ends: tuple[int, ...], values: tuple[Any, ...], metrics: MetricsTable) -> None:
    durations = list(map(operator.sub, ends, starts))
    for i, site in enumerate(sites):
        if site.counted is None:
            continue
        mesh, method = site.counted
        if len(sites) == 1:
            mine, nbytes = durations, _total(values)
        else:
            chosen = list(map(i.__eq__, indices))
            mine = list(itertools.compress(durations, chosen))
            nbytes = _total(list(itertools.compress(values, chosen)))
        metrics.add_invocations(mesh, method, mine, nbytes)


def _total(values: Any) -> int:
    try:
        return sum(filter(None, values))
    except TypeError:  # not byte counts: the spans keep them, the byte counter does not
        return sum(v for v in values if type(v) is int)


def count_dropped_invocation(item: tuple[Any, ...], metrics: MetricsTable) -> None:
    """Counts the metrics of an ended invocation whose span could not be buffered."""
    site_id, _, _, _, start, value, end, _ = item
    site = _by_id[site_id]
    if site.counted is not None:
        mesh, method = site.counted
        metrics.add_invocations(mesh, method, [end - start], _total([value]))
