"""What the admin API shows: the job's state as plain JSON-able dicts.

`snapshot` copies the supervisor's bookkeeping (on the controller's I/O thread, the only one
that mutates it); everything else here is pure, over that copy and the telemetry store.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Collection
from itertools import accumulate
from operator import is_
from typing import Any

from .. import telemetry
from ..telemetry import _services
from ..telemetry._derived import METRICS as DERIVED_METRICS
from ..telemetry._derived import tensor_engines, weights
from ._supervisor import FAILED, RUNNING, STARTING, STOPPED, STOPPING

CONTROLLER = "controller"
"""The proc name of the controller process (it hosts actors too: `this_proc()`)."""
DEFAULT_STALL_S = 10.0
"""A handler running longer than this (seconds; `MONARCH_STALL_S`) is stalled."""


def snapshot(job: Any) -> dict[str, Any]:
    """Copies what the supervisor knows (call on the I/O thread)."""
    sup = job.supervisor
    return {
        "procs": [_proc_copy(r) for r in sup.procs.values()],
        "meshes": [_mesh_copy(m) for m in sup.meshes.values()],
        "failures": [dict(f) for f in sup.failures],
        "proc_extents": {k: (list(v[0]), list(v[1]))
                         for k, v in getattr(job, "proc_extents", {}).items()},
        "stall_s": getattr(job, "stall_s", DEFAULT_STALL_S),
        "controller": {"proc": CONTROLLER, "procs": "ctl", "rank": 0, "pid": os.getpid(),
                       "state": RUNNING, "address": job.runtime.address, "host": job.hostname,
                       "host_id": "local", "status": None, "started": job.started,
                       "meshes": []},
    }


def _proc_copy(r: Any) -> dict[str, Any]:
    return {"proc": r.proc, "procs": r.procs, "rank": r.rank, "address": r.address,
            "host": r.host, "host_id": r.host_id, "pid": r.pid, "state": r.state,
            "status": r.status, "started": r.started, "meshes": sorted(r.meshes)}


def _mesh_copy(m: Any) -> dict[str, Any]:
    return {"mesh": m.mesh, "name": m.name, "class_name": m.class_name, "owner_id": m.owner_id,
            "procs": m.procs, "ranks": dict(m.ranks), "labels": dict(m.labels),
            # a rank's coords dict is replaced, never changed: the copy shares them (copying
            # 1,024 of them was a seventh of the topology's poll under `monarch top`)
            "states": dict(m.states), "coords": dict(m.coords),
            "extent": (list(m.extent[0]), list(m.extent[1]))}


def mesh_snapshot(job: Any, mesh: str) -> dict[str, Any]:
    """What `actor_entry` needs of the supervisor: the meshes with id or name `mesh`, their
    failures and the states of their procs (call on the I/O thread). A copy of everything,
    as `snapshot`, was most of the console's poll of one actor at 1,024 actors."""
    sup = job.supervisor
    meshes = [_mesh_copy(m) for m in sup.meshes.values() if mesh in (m.mesh, m.name)]
    ids = {m["mesh"] for m in meshes}
    procs = {proc for m in meshes for proc in m["ranks"].values()}
    return {"meshes": meshes, "failures": [dict(f) for f in sup.failures if f.get("mesh") in ids],
            "proc_states": {r.proc: r.state for r in sup.procs.values() if r.proc in procs},
            "stall_s": getattr(job, "stall_s", DEFAULT_STALL_S)}


def actor_entry(snap: dict[str, Any], store: telemetry.Store,
                rank: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(mesh, actor) of rank `rank` of the last mesh of `mesh_snapshot` that has it, the actor
    as the topology shows it (its counters read from its process's points only); None if no
    mesh has that rank."""
    found = [m for m in snap["meshes"] if rank in m["ranks"]]
    if not found:
        return None
    mesh = found[-1]
    proc = mesh["ranks"][rank]
    index = MetricIndex.of(store, sources=(proc,))
    failure = next((f for f in reversed(snap["failures"])
                    if f.get("mesh") == mesh["mesh"] and f.get("rank") == rank), None)
    live = Live(store.actor_statuses(), float(snap["stall_s"]))
    return (_mesh_header(mesh),
            _actor(mesh, rank, index, failure, snap["proc_states"].get(proc), live))


# -- topology ---------------------------------------------------------------------------------

def topology(snap: dict[str, Any], store: telemetry.Store,
             rows: Collection[str] | None = None) -> dict[str, Any]:
    """Hosts → procs (with counters) and meshes → actors (with counters and failures).

    Args:
        rows: the meshes (ids or names) whose every actor is wanted, or ``<mesh id>@<host
            id>`` for a mesh's actors on one host only (the rest of it folded: a console
            that shows a mesh of a thousand ranks open on one host); any other mesh comes
            folded (`_folded`): a summary by host and only its actors that are not simply
            running. None: every actor of every mesh.
    """
    index = MetricIndex.of(store)
    points = store.metrics(by_process=True, names=_services.METRICS | DERIVED_METRICS)
    procs = [snap["controller"], *snap["procs"]]
    for mesh in snap["meshes"]:
        for proc in mesh["ranks"].values():
            if proc == CONTROLLER:
                snap["controller"]["meshes"].append(mesh["mesh"])
    proc_states = {p["proc"]: p["state"] for p in procs}
    live = Live(store.actor_statuses(), float(snap.get("stall_s", DEFAULT_STALL_S)))
    if rows is None:
        meshes = [_mesh(m, index, snap["failures"], proc_states, live) for m in snap["meshes"]]
    else:
        host_of = {p["proc"]: p["host_id"] for p in procs}
        windows = host_windows(rows, {m["mesh"] for m in snap["meshes"]})
        meshes = [_mesh(m, index, snap["failures"], proc_states, live)
                  if m["mesh"] in rows or m["name"] in rows
                  else _folded(m, index, snap["failures"], proc_states, live, host_of,
                               windows.get(m["mesh"], frozenset()))
                  for m in snap["meshes"]]
    found = _services.services(points)
    _services.annotate(meshes, found)
    return {"hosts": _hosts(procs, index, snap["proc_extents"]), "meshes": meshes,
            "failures": [failure_dict(f) for f in snap["failures"]], "services": found,
            "weights": weights(points), "tensor_engines": tensor_engines(points),
            "stall_s": live.stall_s}


class Live:
    """What each actor runs now (its newest reported status) and the stall threshold."""

    def __init__(self, statuses: dict[str, telemetry.ActorStatus], stall_s: float,
                 now_ns: int | None = None) -> None:
        self.statuses, self.stall_s = statuses, stall_s
        self.now_ns = time.time_ns() if now_ns is None else now_ns

    def actor(self, actor_id: str, state: str) -> tuple[Any, Any, bool]:
        """running (each handler: method, since, running_s, caller, trace_id, stalled),
        queued_methods and stalled of one actor (sequences; the empty ones are `()`, which
        costs no allocation: this runs for every actor at every topology poll)."""
        status = self.statuses.get(actor_id)
        if status is None:
            return (), (), False
        queued = tuple(status.queued_methods)
        if not status.running or state in (FAILED, STOPPED):
            return (), queued, False
        running = [handler_dict(h, self.now_ns, self.stall_s) for h in status.running]
        return running, queued, any(h["stalled"] for h in running)


def handler_dict(h: telemetry.RunningHandler, now_ns: int, stall_s: float) -> dict[str, Any]:
    """A running handler: method, since (epoch s), running_s, caller, trace_id, stalled."""
    running_s = round(max(now_ns - h.start_ns, 0) / 1e9, 3)
    return {"method": h.method, "since": h.start_ns / 1e9, "running_s": running_s,
            "caller": h.sender, "trace_id": h.trace_id, "bytes": h.nbytes,
            "stalled": stalled(h, now_ns, stall_s * 1e9)}


def stalled(h: telemetry.RunningHandler, now_ns: int, stall_ns: float) -> bool:
    """Whether a handler has run `stall_ns` or longer: one rule for an actor's row and its
    folded mesh's count (the shown `running_s` is rounded to the millisecond)."""
    return now_ns - h.start_ns >= stall_ns


def _hosts(procs: list[dict[str, Any]], index: MetricIndex,
           extents: dict[str, Any]) -> list[dict[str, Any]]:
    hosts: dict[str, dict[str, Any]] = {}
    for proc in procs:
        host = hosts.setdefault(proc["host_id"], {"id": proc["host_id"],
                                                  "hostname": proc["host"], "procs": []})
        host["hostname"] = host["hostname"] or proc["host"]
        host["procs"].append(_proc(proc, index, extents.get(proc["procs"])))
    return list(hosts.values())


def _proc(proc: dict[str, Any], index: MetricIndex, extent: Any) -> dict[str, Any]:
    out = {k: proc[k] for k in ("proc", "procs", "rank", "pid", "state", "address", "host",
                                "status", "started", "meshes")}
    out["point"] = _point(proc["rank"], extent)
    out["counters"] = index.proc_counters(proc["proc"])
    return out


def _point(rank: int, extent: Any) -> dict[str, int]:
    if not extent:
        return {}
    labels, sizes = extent
    coords: dict[str, int] = {}
    for label, size in reversed(list(zip(labels, sizes))):
        rank, coords[label] = divmod(rank, size)
    return {label: coords[label] for label in labels}


def _mesh(mesh: dict[str, Any], index: MetricIndex, failures: list[dict[str, Any]],
          proc_states: dict[str, str], live: Live) -> dict[str, Any]:
    last_failure = {f["rank"]: f for f in failures if f.get("mesh") == mesh["mesh"]}
    actors = [_actor(mesh, rank, index, last_failure.get(rank),
                     proc_states.get(mesh["ranks"][rank]), live)
              for rank in sorted(mesh["ranks"])]
    return {**_mesh_header(mesh), "actors": actors}


def _mesh_header(mesh: dict[str, Any]) -> dict[str, Any]:
    """What the topology shows of a mesh besides its actors: id, name, class, owner, proc
    mesh and extent."""
    labels, sizes = mesh["extent"]
    return {"mesh": mesh["mesh"], "name": mesh["name"], "class_name": mesh["class_name"],
            "owner_id": mesh["owner_id"], "procs": mesh["procs"],
            "extent": {"labels": labels, "sizes": sizes}}


def host_windows(rows: Collection[str], mesh_ids: Collection[str]) -> dict[str, frozenset[str]]:
    """The hosts whose actors are wanted, by mesh id, of the ``<mesh id>@<host id>`` items of
    `rows` (split at the ``@`` that ends a mesh id of the job: a mesh's name may hold one)."""
    windows: dict[str, set[str]] = {}
    for item in rows:
        at = item.find("@")
        while at > 0:
            if item[:at] in mesh_ids:
                windows.setdefault(item[:at], set()).add(item[at + 1:])
                break
            at = item.find("@", at + 1)
    return {mesh: frozenset(hosts) for mesh, hosts in windows.items()}


def _folded(mesh: dict[str, Any], index: MetricIndex, failures: list[dict[str, Any]],
            proc_states: dict[str, str], live: Live, host_of: dict[str, str],
            open_hosts: Collection[str] = frozenset()) -> dict[str, Any]:
    """A mesh without its rows: per host (`folded`) its actors' count, states, messages, queue
    depth, latency p50 (of their histograms together), newest method and stalled handlers;
    each rank's proc (`rank_procs`, [rank, proc] pairs: what an action on a slice needs); in
    `actors` only the actors that are not simply running (failed, stopped, starting,
    stalled): what a folded row must still point at; and every actor on the hosts of
    `open_hosts`, which the answer names (its `open_hosts`, sorted: the hosts whose rows
    `actors` holds whole).

    Hot: a console folds a big mesh by default, so at 1,024 actors this runs in place of
    `_mesh` for most of them at every poll; nothing is built per actor but the notable ones
    (one pass, ~2.6 µs an actor: comprehensions per host were slower, a host has few ranks)."""
    name, mesh_id, states, ranks = mesh["name"], mesh["mesh"], mesh["states"], mesh["ranks"]
    last_failure = {f["rank"]: f for f in failures if f.get("mesh") == mesh_id}
    handled, queue, latency = index.handled, index.queue, index.latency
    statuses, stall_ns, now_ns = live.statuses, live.stall_s * 1e9, live.now_ns
    hosts: dict[str, dict[str, Any]] = {}
    histograms: dict[str, Histogram] = {}
    newest: dict[str, int] = {}
    notable: list[dict[str, Any]] = []
    order = sorted(ranks)
    for rank in order:
        proc = ranks[rank]
        host_id = host_of.get(proc, "local")
        summary = hosts.get(host_id)
        if summary is None:
            summary = hosts[host_id] = {"actors": 0, "states": {}, "messages": 0,
                                        "queue_depth": 0, "latency_p50_ms": None,
                                        "last_method": None, "stalled": 0}
            histograms[host_id], newest[host_id] = Histogram(), -1
        state = _actor_state(states, rank, proc_states.get(proc))
        actor_id = f"{mesh_id}[{rank}]"
        summary["actors"] += 1
        summary["states"][state] = summary["states"].get(state, 0) + 1
        done = handled.get((proc, name))
        if done is not None:
            summary["messages"] += int(done[0])
            if done[1] > newest[host_id]:
                newest[host_id], summary["last_method"] = done[1], done[2]
        summary["queue_depth"] += int(queue.get((proc, actor_id), 0))
        points = latency.get((proc, name))
        if points:
            histograms[host_id].add(points)
        status = statuses.get(actor_id)
        stuck = state == RUNNING and status is not None and any(
            stalled(h, now_ns, stall_ns) for h in status.running)
        summary["stalled"] += stuck
        if stuck or state != RUNNING or rank in last_failure or host_id in open_hosts:
            notable.append(_actor(mesh, rank, index, last_failure.get(rank),
                                  proc_states.get(proc), live))
    for host_id, histogram in histograms.items():
        hosts[host_id]["latency_p50_ms"] = histogram.p50_ms()
    return {**_mesh_header(mesh), "actors": notable, "folded": hosts,
            "rank_procs": [[r, ranks[r]] for r in order],
            "open_hosts": sorted(h for h in open_hosts if h in hosts)}


def _actor_state(states: dict[int, str], rank: int, proc_state: str | None) -> str:
    """An actor's state: its mesh's record of it, or its process's when that is ending or
    gone while the actor still counts as running."""
    state = states.get(rank, STARTING)
    if state == RUNNING and proc_state in (STOPPING, STOPPED, FAILED):
        return proc_state
    return state


def _actor(mesh: dict[str, Any], rank: int, index: MetricIndex,
           failure: dict[str, Any] | None, proc_state: str | None,
           live: Live) -> dict[str, Any]:
    proc, name = mesh["ranks"][rank], mesh["name"]
    actor_id = f"{mesh['mesh']}[{rank}]"
    messages, queue_depth, p50, last_method = index.stats(proc, name, actor_id)
    state = _actor_state(mesh["states"], rank, proc_state)
    running, queued, stuck = live.actor(actor_id, state)
    return {"rank": rank, "proc": proc, "state": state, "actor_id": actor_id,
            "label": mesh["labels"].get(rank, ""), "point": mesh["coords"].get(rank, {}),
            "messages": messages, "queue_depth": queue_depth, "latency_p50_ms": p50,
            "last_method": last_method, "running": running, "queued_methods": queued,
            "stalled": stuck, "failure": failure.get("report") if failure else None}


INDEX_METRICS = frozenset({"messages_handled", "handler_latency_seconds", "queue_depth",
                           "message_bytes", "failures"})
"""The metrics `MetricIndex` reads (a job of 1,024 actors holds many more series; indexing
all of them was a seventh of the topology's poll under `monarch top`)."""


def actor_rows(topo: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``actors`` SQL table's rows (see `monarch.telemetry._tables`) of a topology."""
    procs = {p["proc"]: p for h in topo["hosts"] for p in h["procs"]}
    now = time.time_ns()
    rows = []
    for mesh in topo["meshes"]:
        for a in mesh["actors"]:
            proc = procs.get(a["proc"], {})
            first = a["running"][0] if a["running"] else {}
            rows.append({
                "actor": a["actor_id"], "mesh": mesh["name"],
                "mesh_id": mesh["mesh"], "rank": a["rank"],
                "point": ",".join(f"{k}={v}" for k, v in a["point"].items()),
                "actor_class": mesh["class_name"], "proc": a["proc"], "host": proc.get("host"),
                "pid": proc.get("pid"), "state": a["state"], "messages": a["messages"],
                "queue_depth": a["queue_depth"], "latency_p50_ms": a["latency_p50_ms"],
                "last_method": a["last_method"], "running_method": first.get("method"),
                "running_since_ns": int(first["since"] * 1e9) if first else None,
                "running_s": first.get("running_s"), "caller": first.get("caller"),
                "trace_id": first.get("trace_id"), "running": len(a["running"]),
                "queued": a["queue_depth"], "queued_methods": ",".join(a["queued_methods"]),
                "stalled": a["stalled"], "failure": a["failure"], "updated_ns": now})
    return rows


class MetricIndex:
    """The store's per-process metric points by metric name, indexed for the topology's
    counters (it reads `INDEX_METRICS`; `of` takes them from a store, metric by metric).

    Hot: `stats` runs for every actor at every topology poll (1,024 actors, twice a second
    under `monarch top`, each actor's points new every second in a busy job), so an actor's
    messages and newest method are summed here once, as the points are indexed."""

    def __init__(self, named: dict[str, list[telemetry.MetricPoint]]) -> None:
        # (process, mesh name) -> [messages, newest point's time, its method]
        self.handled: dict[tuple[str, str], list[Any]] = {}
        self.latency: dict[tuple[str, str], list[telemetry.MetricPoint]] = {}
        self.queue: dict[tuple[str, str], float] = {}
        self.procs: dict[str, dict[str, Any]] = {}  # proc -> `proc_counters`
        self._index(named)

    @classmethod
    def of(cls, store: telemetry.Store, sources: Collection[str] | None = None) -> MetricIndex:
        """The index of `store`'s points, read by name (a job of 1,024 actors holds many
        more series than these); of the processes `sources` only, when given."""
        named = {name: store.metrics(by_process=True, names=(name,)) for name in INDEX_METRICS}
        if sources is not None:
            named = {name: [p for p in points if p.source in sources]
                     for name, points in named.items()}
        return cls(named)

    def _index(self, named: dict[str, list[telemetry.MetricPoint]]) -> None:
        procs = self.procs

        def counters(proc: str) -> dict[str, Any]:
            found = procs.get(proc)
            if found is None:
                found = procs[proc] = {"messages": 0, "bytes_sent": 0, "bytes_received": 0,
                                       "failures": 0}
            return found

        for p in named.get("message_bytes", ()):  # one series per direction
            counters(p.source)["bytes_" + p.labels.get("direction", "sent")] = int(p.value)
        for p in named.get("failures", ()):
            counters(p.source)["failures"] += int(p.value)
        handled, latency, queue = self.handled, self.latency, self.queue
        for p in named.get("messages_handled", ()):
            source, labels, value = p.source, p.labels, p.value
            counters(source)["messages"] += int(value)
            key = (source, labels.get("mesh", ""))
            found = handled.get(key)
            if found is None:
                handled[key] = [value, p.time_ns, labels.get("method")]
            else:
                found[0] += value
                if p.time_ns > found[1]:
                    found[1], found[2] = p.time_ns, labels.get("method")
        for p in named.get("handler_latency_seconds", ()):
            key = (p.source, p.labels.get("mesh", ""))
            points = latency.get(key)
            if points is None:
                latency[key] = [p]
            else:
                points.append(p)
        for p in named.get("queue_depth", ()):
            queue[(p.source, p.labels.get("actor", ""))] = p.value

    def stats(self, proc: str, mesh_name: str,
              actor_id: str) -> tuple[int, int, float | None, str | None]:
        """One actor's messages, queue depth, latency p50 (ms) and last method."""
        key = (proc, mesh_name)
        handled = self.handled.get(key)
        latency = self.latency.get(key)
        return (int(handled[0]) if handled else 0, int(self.queue.get((proc, actor_id), 0)),
                p50_ms(latency) if latency else None, handled[2] if handled else None)

    def proc_counters(self, proc: str) -> dict[str, Any]:
        """messages handled, bytes sent/received and failures of one process."""
        found = self.procs.get(proc)
        return dict(found) if found else {"messages": 0, "bytes_sent": 0,
                                          "bytes_received": 0, "failures": 0}


class Histogram:
    """Histograms of equal bounds summed bucket by bucket (those of other bounds than the
    first are left out, as `p50_ms` does); `p50_ms` of the sum.

    Hot: a folded mesh sums its actors' histograms per host at every topology poll (1,024 of
    19 buckets under `monarch top`), so `add` only gathers them and `p50_ms` sums them column
    by column once, not a new list per histogram added."""

    __slots__ = ("bounds", "rows")

    def __init__(self) -> None:
        self.bounds: Any = None
        self.rows: list[tuple[int, ...]] = []

    def add(self, points: list[telemetry.MetricPoint]) -> None:
        for p in points:
            if not p.count:
                continue
            if self.bounds is None:
                self.bounds = p.bounds
            elif p.bounds is not self.bounds and p.bounds != self.bounds:
                continue
            self.rows.append(p.buckets)

    def p50_ms(self) -> float | None:
        if self.bounds is None:
            return None
        rows = self.rows
        return _median_ms(self.bounds, rows[0] if len(rows) == 1 else list(map(sum, zip(*rows))))


def p50_ms(points: list[telemetry.MetricPoint]) -> float | None:
    """The median of histograms with equal bounds (interpolated in its bucket), in ms.

    Hot: once per actor per topology (1,024 actors, twice a second under `monarch top`); an
    actor's latency is one histogram but for a mesh name reused in a process, so one point is
    read as it is and several are summed column by column."""
    if len(points) == 1:
        point = points[0]
        return _median_ms(point.bounds, point.buckets) if point.count else None
    summed = Histogram()
    summed.add(points)
    return summed.p50_ms()


def _median_ms(bounds: Any, buckets: Any) -> float | None:
    """The median (ms) of one histogram (interpolated in its bucket); None when empty."""
    below = list(accumulate(buckets))  # observations up to each bucket's bound
    half = below[-1] / 2 if below else 0
    if not half:
        return None
    i = bisect_left(below, half)  # the first bucket that reaches the half (never empty)
    count = buckets[i]
    low = bounds[i - 1] if i > 0 else 0.0
    high = bounds[i] if i < len(bounds) else low * 2 or 1.0
    return round((low + (high - low) * (half - (below[i] - count)) / count) * 1000, 3)


# -- job --------------------------------------------------------------------------------------

def census(job: Any) -> dict[str, Any]:
    """What `job_info` counts, copied from the supervisor (call on the I/O thread): polled
    twice a second by `monarch top`, so no copy of every mesh as `snapshot` makes."""
    sup = job.supervisor
    return {"procs": [(r.host_id, r.state) for r in sup.procs.values()],
            "actors": sum(len(m.ranks) for m in sup.meshes.values()),
            "meshes": len(sup.meshes), "failures": len(sup.failures),
            "failed_ranks": sum(1 for m in sup.meshes.values() for s in m.states.values()
                                if s == FAILED)}


def job_info(job: Any, counted: dict[str, Any], address: str) -> dict[str, Any]:
    """The job's identity, uptime, health and counts (`counted`: a `census`)."""
    procs = counted["procs"]
    live = sum(1 for _, state in procs if state in (STARTING, RUNNING, STOPPING))
    failed_procs = sum(1 for _, state in procs if state == FAILED)
    health = "ok"
    if counted["failed_ranks"] or failed_procs or counted["failures"]:
        health = "degraded" if live else "failed"
    return {"job_id": job.job_id, "pid": os.getpid(), "hostname": job.hostname,
            "address": address, "started": job.started,
            "uptime_s": round(time.time() - job.started, 3), "health": health,
            "counts": {"hosts": len({host for host, _ in procs} | {"local"}),
                       "procs": len(procs), "procs_live": live,
                       "meshes": counted["meshes"], "actors": counted["actors"],
                       "failures": counted["failures"]}}


TOP_LINE_METRICS = frozenset({"start_to_first_proc_ready_seconds", "actor_spawn_seconds",
                              "messages_undelivered", "job_failures", "stalled_handlers"})


def top_line(store: telemetry.Store) -> dict[str, Any]:
    """The job's headline figures: seconds from start to the first proc ready, actor spawn
    time (p50 ms), messages undelivered, failures by cause (user: an endpoint raised;
    infrastructure: a proc died, a host was lost) and handlers stalled now."""
    # Each process's own points, summed here: aggregating them (a dataclass made per point)
    # took a sixth of the admin API's time under `monarch top` at 1,024 actors; the sums and
    # the median of the summed histograms are the same.
    return headline(store.metrics(by_process=True, names=TOP_LINE_METRICS))


class SameP50:
    """`p50_ms` of the last points asked again while they are the same objects: a process
    ships a series only when it changed, and `actor_spawn_seconds` (a histogram per mesh per
    proc: 1,024 at 1,024 actors) changes only when actors spawn, yet `monarch top` asks for
    the headline twice a second (summing them each time was most of `/v1/job`'s cost).
    Thread-safe: the pair is replaced whole; two threads at once at worst both compute."""

    def __init__(self) -> None:
        self._last: tuple[list[telemetry.MetricPoint], float | None] = ([], None)

    def of(self, points: list[telemetry.MetricPoint]) -> float | None:
        held, value = self._last
        if len(held) == len(points) and all(map(is_, held, points)):
            return value
        value = p50_ms(points) if points else None
        self._last = (points, value)
        return value


_SPAWN_P50 = SameP50()


def headline(points: list[telemetry.MetricPoint]) -> dict[str, Any]:
    """`top_line`'s figures from metric points, per process or aggregated (the same sums).

    One pass over the points (`monarch top` asks twice a second; a pass per figure over a
    point per process was half of `/v1/job`'s cost at 64 procs)."""
    ready: list[float] = []
    spawn: list[telemetry.MetricPoint] = []
    undelivered = user = infrastructure = stalled_now = 0.0
    for p in points:
        name = p.name
        if name == "actor_spawn_seconds":
            spawn.append(p)
        elif name == "stalled_handlers":
            stalled_now += p.value
        elif name == "messages_undelivered":
            undelivered += p.value
        elif name == "job_failures":
            cause = p.labels.get("cause")
            if cause == "user":
                user += p.value
            elif cause == "infrastructure":
                infrastructure += p.value
        elif name == "start_to_first_proc_ready_seconds":
            ready.append(p.value)
    return {"first_proc_ready_s": round(ready[0], 3) if ready else None,
            "actor_spawn_p50_ms": _SPAWN_P50.of(spawn), "messages_undelivered": int(undelivered),
            "failures_user": int(user), "failures_infrastructure": int(infrastructure),
            "stalled_handlers": int(stalled_now)}


# -- records ----------------------------------------------------------------------------------

def failure_dict(f: dict[str, Any]) -> dict[str, Any]:
    """A supervisor failure as JSON (mesh, mesh_name, rank, class_name, host, pid, ...)."""
    keys = ("mesh", "mesh_name", "rank", "class_name", "proc", "host", "pid", "exit_code",
            "signal", "reason", "report", "time", "owner_id")
    return {k: f.get(k) for k in keys}


def record_dict(record: Any) -> dict[str, Any]:
    """Any telemetry record as a JSON-able dict with its `kind`."""
    return {"kind": record.KIND, **_CONVERT[record.KIND](record)}


def log_dict(r: telemetry.LogRecord) -> dict[str, Any]:
    """A log record: hlc, time, stream, level, text, mesh, rank, proc, host (+ tags)."""
    tags = r.tags
    return {"hlc": r.hlc, "time": r.wall_ns / 1e9, "stream": r.stream, "level": r.level,
            "text": r.text, "mesh": tags.get("mesh"), "rank": tags.get("rank"),
            "proc": tags.get("proc"), "host": tags.get("host"), "pid": tags.get("pid"),
            "tags": _jsonable(tags), "trace_id": _hex(r.trace_id), "span_id": _hex(r.span_id)}


def span_dict(s: telemetry.SpanRecord) -> dict[str, Any]:
    """A span: ids in hex, times in ns, duration in ms, attributes, outcome, source."""
    return {"trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
            "parent_span_id": _hex(s.parent_span_id), "name": s.name, "start_ns": s.start_ns,
            "end_ns": s.end_ns, "duration_ms": round(s.duration_ns / 1e6, 3),
            "attributes": _jsonable(s.attributes), "outcome": s.outcome, "source": s.source,
            "mesh": s.attributes.get("mesh"), "rank": s.attributes.get("rank")}


def message_dict(m: telemetry.MessageRecord) -> dict[str, Any]:
    """A handled message (flight recorder): method, sender, start, duration_ms, outcome."""
    return {"method": m.method, "sender": m.sender, "start": m.start_ns / 1e9,
            "duration_ms": round((m.end_ns - m.start_ns) / 1e6, 3), "outcome": m.outcome,
            "bytes": m.nbytes, "actor": m.actor, "proc": m.source}


def event_dict(e: telemetry.StatusEvent) -> dict[str, Any]:
    """A status event: time, actor, mesh, rank, event, detail, proc."""
    return {"time": e.time_ns / 1e9, "actor": e.actor, "mesh": e.mesh_name, "rank": e.rank,
            "event": e.event, "detail": e.detail, "proc": e.source}


def metric_dict(p: telemetry.MetricPoint) -> dict[str, Any]:
    """A metric series' current value (histograms with count, bounds and buckets)."""
    out = {"name": p.name, "type": p.kind, "labels": dict(p.labels), "value": p.value,
           "time_ns": p.time_ns, "source": p.source}
    if p.kind == "histogram":
        out.update(count=p.count, bounds=list(p.bounds), buckets=list(p.buckets))
    return out


def transfer_dict(t: telemetry.TransferRecord) -> dict[str, Any]:
    """One data-plane transfer."""
    return {"nbytes": t.nbytes, "seconds": t.seconds, "src": t.src, "dst": t.dst,
            "type": t.kind, "time": t.time_ns / 1e9, "mesh": t.mesh, "source": t.source}


def failure_record_dict(f: telemetry.FailureRecord) -> dict[str, Any]:
    """A stored failure record, with the supervisor's key names."""
    return {"mesh_name": f.mesh, "rank": f.rank, "class_name": f.actor_class, "host": f.host,
            "pid": f.pid, "exit_code": f.exit_code, "signal": f.signal, "reason": f.reason,
            "report": f.traceback, "time": f.time_ns / 1e9, "proc": f.source}


_CONVERT: dict[str, Any] = {"log": log_dict, "span": span_dict, "metric": metric_dict,
                            "transfer": transfer_dict, "failure": failure_record_dict}


def _hex(value: bytes | None) -> str | None:
    return value.hex() if value is not None else None


def _jsonable(tags: dict[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
            for k, v in tags.items()}


# -- transfers --------------------------------------------------------------------------------

def transfers(store: telemetry.Store, window: float, history_s: float = 60.0,
              bucket_s: float = 1.0, now_ns: int | None = None) -> dict[str, Any]:
    """Bytes/s per link, mesh and kind over `window` s, each with a per-bucket history (bytes/s
    of each `bucket_s` over the last `history_s`, oldest first) for a sparkline."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    summary = store.transfers(window, now_ns)
    nbuckets = max(int(history_s / bucket_s), 1)
    start = now_ns - int(nbuckets * bucket_s * 1e9)
    hist: dict[tuple[str, Any], list[float]] = {}
    for t in store.transfer_records(limit=50_000):
        if start < t.time_ns <= now_ns:
            slot = min(int((t.time_ns - start) / (bucket_s * 1e9)), nbuckets - 1)
            for key in (("link", (t.src, t.dst)), ("mesh", t.mesh or ""), ("total", "")):
                hist.setdefault(key, [0.0] * nbuckets)[slot] += t.nbytes / bucket_s
    empty = [0.0] * nbuckets

    def rate(r: telemetry.Rate, key: tuple[str, Any]) -> dict[str, Any]:
        return {"bytes": r.nbytes, "count": r.count, "bytes_per_s": r.bytes_per_s,
                "history": hist.get(key, empty)}

    return {"window": window, "bucket_s": bucket_s,
            "total": rate(summary.total, ("total", "")),
            "links": [{"src": s, "dst": d, **rate(r, ("link", (s, d)))}
                      for (s, d), r in sorted(summary.links.items())],
            "meshes": [{"mesh": m, **rate(r, ("mesh", m))}
                       for m, r in sorted(summary.meshes.items())],
            "kinds": [{"type": k, "bytes": r.nbytes, "count": r.count,
                       "bytes_per_s": r.bytes_per_s} for k, r in sorted(summary.kinds.items())]}
