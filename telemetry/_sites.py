"""Site spans: the runtime's per-invocation and per-call spans, in a compact form.

Many spans share their name and most attributes: every invocation of one actor's endpoint
(mesh, actor class, rank, method), every call of one endpoint on one mesh. A `SpanSite` holds
what they share and is made once; each span then records only its ids, times, outcome and one
per-span value (an invocation's bytes in). The invocation hot path is a tuple, a deque append and
the trace context, without a lock: the invocation metrics (``messages_handled``,
``handler_latency_seconds``, ``message_bytes{received}``) are derived from the spans when the
recorder drains them, or counted at once when the buffer is full and the span is dropped.

The hot path lives in `monarch.telemetry._spans` (`begin_invocation`, `start_site_span`). A
batch carries each site it uses once and each span as ``[site index, trace_id, span_id,
parent_span_id, start_ns, end_ns, outcome, value]`` (see `monarch.telemetry._batch`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ._records import SpanRecord

if TYPE_CHECKING:
    from ._metrics import MetricsTable

_MAX_CACHED = 4096


class SpanSite:
    """What many spans share: their name and attributes, and the key of their per-span value.

    Args:
        name: the spans' name, e.g. ``trainer.step``.
        attributes: the shared attributes; never mutated once the site exists.
        value_key: the attribute each span's own value goes to (e.g. ``bytes_in``), or None.
        counted: (mesh, method) for invocation sites, whose spans feed the invocation metrics.
    """

    __slots__ = ("attributes", "counted", "name", "value_key")

    def __init__(self, name: str, attributes: dict[str, Any], value_key: str | None = None,
                 counted: tuple[str, str] | None = None) -> None:
        self.name = name
        self.attributes = attributes
        self.value_key = value_key
        self.counted = counted

    def to_wire(self) -> list[Any]:
        """Returns ``[name, attributes, value_key]``, the site's form in a batch."""
        return [self.name, self.attributes, self.value_key]


_invocation_sites: dict[tuple[Any, ...], SpanSite] = {}
_call_sites: dict[tuple[Any, ...], SpanSite] = {}


def invocation_site(mesh: str, actor_class: str, rank: Any, method: str) -> SpanSite:
    """Returns the (cached) site of one actor's endpoint: span ``<mesh>.<method>`` with
    attributes mesh, actor_class, rank, method, and each span's ``bytes_in``."""
    key = (mesh, actor_class, rank, method)
    site = _invocation_sites.get(key)
    if site is None:
        attributes = {"mesh": mesh, "actor_class": actor_class, "rank": rank, "method": method}
        site = _cache(_invocation_sites, key,
                      SpanSite(f"{mesh}.{method}", attributes, "bytes_in", (mesh, method)))
    return site


def call_site(mesh: str, method: str, adverb: str) -> SpanSite:
    """Returns the (cached) site of a caller's span ``call <mesh>.<method>`` made with
    ``adverb`` (call, call_one, broadcast, ...)."""
    key = (mesh, method, adverb)
    site = _call_sites.get(key)
    if site is None:
        attributes = {"mesh": mesh, "method": method, "adverb": adverb}
        site = _cache(_call_sites, key, SpanSite(f"call {mesh}.{method}", attributes))
    return site


def _cache(table: dict[tuple[Any, ...], SpanSite], key: tuple[Any, ...],
           site: SpanSite) -> SpanSite:
    if len(table) >= _MAX_CACHED:  # meshes come and go: keep the cache bounded
        table.clear()
    table[key] = site
    return site


def drain_site_spans(queue: deque[Any], n: int,
                     metrics: MetricsTable) -> tuple[list[Any], list[Any]]:
    """Takes up to ``n`` ended site spans; returns (sites, spans) in batch wire form and adds
    the invocation metrics of the spans taken to ``metrics``."""
    index: dict[SpanSite, tuple[int, list[int] | None]] = {}
    sites: list[SpanSite] = []
    spans: list[Any] = []
    pop, append = queue.popleft, spans.append
    for _ in range(min(n, len(queue))):
        try:
            (site, trace_id, span_id, parent, start, value, _), end, outcome = pop()
        except IndexError:  # another drainer got there first
            break
        known = index.get(site)
        if known is None:
            known = index[site] = (len(sites), None if site.counted is None else [])
            sites.append(site)
        i, counted = known
        append([i, trace_id, span_id, parent, start, end, outcome, value])
        if counted is not None:
            counted += (end - start, value or 0)
    for site in sites:
        counted = index[site][1]
        if counted:
            mesh, method = site.counted  # type: ignore[misc]
            metrics.add_invocations(mesh, method, counted[::2], _total(counted[1::2]))
    return [site.to_wire() for site in sites], spans


def _total(values: list[Any]) -> int:
    try:
        return sum(values)
    except TypeError:  # not byte counts: the spans keep them, the byte counter does not
        return sum(v for v in values if type(v) is int)


def count_dropped_invocation(item: tuple[Any, ...], metrics: MetricsTable) -> None:
    """Counts the metrics of an ended invocation whose span could not be buffered."""
    (site, _, _, _, start, value, _), end, _ = item
    if site.counted is not None:
        mesh, method = site.counted
        metrics.add_invocations(mesh, method, [end - start], _total([value or 0]))


StoredSite = tuple[str, dict[str, Any], "str | None", str]
"""A site as the controller keeps it: (name, attributes, value_key, source process)."""

SiteSpans = tuple[list["StoredSite | None"], list[tuple[Any, ...]]]
"""The site spans of one batch as the controller keeps them: the batch's sites (None for one
that could not be read) and its spans as tuples ``(site index, trace_id, span_id,
parent_span_id, start_ns, end_ns, outcome, value)``. The tuples hold only atoms, so the garbage
collector stops tracking them: a store full of spans does not slow down every collection."""


def check_site_spans(wire: list[Any], source: str) -> tuple[SiteSpans, int]:
    """Reads the site spans of a batch wire list (sent by ``source``).

    Returns:
        (site spans, invalid): the readable spans (each with a readable site), and how many
        entries could not be read.
    """
    if len(wire) < 9:
        return ([], []), 0
    entries = wire[8]
    if not isinstance(entries, (list, tuple)):
        return ([], []), 1
    sites = _check_sites(wire[7], source)
    spans: list[tuple[Any, ...]] = []
    bad = 0
    append = spans.append
    for entry in entries:
        try:
            entry = tuple(entry[:8]) if len(entry) != 8 else tuple(entry)  # newer: more fields
            i, trace_id, span_id, parent, start, end, outcome, _ = entry
            site = sites[i] if type(i) is int and i >= 0 else None
        except (TypeError, ValueError, IndexError, KeyError):
            bad += 1
            continue
        if (site is not None and type(trace_id) is bytes and type(span_id) is bytes
                and (parent is None or type(parent) is bytes) and type(start) is int
                and type(end) is int and type(outcome) is str):
            append(entry)
        else:
            bad += 1
    return (sites, spans), bad


def _check_sites(sites: Any, source: str) -> list[StoredSite | None]:
    if not isinstance(sites, (list, tuple)):
        return []
    checked: list[StoredSite | None] = []
    for site in sites:
        try:
            name, attributes, key = site[:3]
        except (TypeError, ValueError, KeyError):
            checked.append(None)
            continue
        ok = (type(name) is str and type(attributes) is dict
              and (key is None or type(key) is str))
        checked.append((name, attributes, key, source) if ok else None)
    return checked


def site_span_record(site: StoredSite, span: tuple[Any, ...]) -> SpanRecord:
    """Returns the `SpanRecord` of a span from `check_site_spans`, given its site."""
    name, attributes, key, source = site
    _, trace_id, span_id, parent, start, end, outcome, value = span
    attributes = dict(attributes)
    if key is not None:
        attributes[key] = value
    return SpanRecord(trace_id, span_id, parent, name, start, end, attributes, outcome, source)


def site_span_records(site_spans: SiteSpans) -> list[SpanRecord]:
    """Returns the `SpanRecord` of every span from `check_site_spans`."""
    sites, spans = site_spans
    return [site_span_record(sites[span[0]], span) for span in spans]  # type: ignore[arg-type]
