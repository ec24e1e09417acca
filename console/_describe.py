"""What the detail pane says about the selected row (pure: fields, tables, failure text)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from ._format import fmt_bytes, fmt_duration, fmt_ms, fmt_rate
from ._model import FAILED, Index, Row, Snapshot, format_extent, root_cause, service_note


@dataclasses.dataclass(frozen=True, slots=True)
class Description:
    """The detail pane's content: a title, key/value fields, an optional table, and for a
    failed actor (or a mesh with failures) the root cause and the report with its traceback."""

    title: str
    state: str
    fields: tuple[tuple[str, str], ...]
    table: tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None = None
    failure: str | None = None
    report: str | None = None
    whole: str = ""
    """The resource view that lists every row of `table` (the pane shows `TABLE_SHOWN`)."""


TABLE_SHOWN = 16
"""Rows of a description's table the detail pane shows: a host or proc mesh of a thousand procs
made a table the pane rendered again at every refresh (a 64-row one took a 1,024-actor
console's keys to 200-400 ms); the resource view named in `Description.whole` lists them all."""


def describe(row: Row | None, snapshot: Snapshot,
             rates: Mapping[str, float] | None = None) -> Description:
    """The description of `row` in `snapshot`."""
    rates = rates or {}
    index = Index(snapshot)
    if row is None or row.kind == "job":
        return _job(snapshot, index)
    if row.kind == "host":
        return _host(row, index)
    if row.kind == "procs":
        return _procs(row, index)
    if row.kind == "mesh":
        return _mesh(row, index, rates)
    return _actor(row, index, rates, snapshot.actor)


def _job(snapshot: Snapshot, index: Index) -> Description:
    job = snapshot.job or {}
    counts = job.get("counts") or {}
    started = job.get("started")
    fields = [("job", str(job.get("job_id", "?"))), ("health", str(job.get("health", "?"))),
              ("controller", f"{job.get('hostname', '?')} pid {job.get('pid', '?')}"),
              ("address", str(job.get("address", "?"))),
              ("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
               if started else "?"),
              ("uptime", fmt_duration(job.get("uptime_s")))]
    fields += [(k, str(v)) for k, v in counts.items()]
    rows = tuple((str(f.get("mesh_name") or f.get("mesh")), str(f.get("rank")),
                  root_cause(f)) for f in index.failures[-20:])
    table = (("mesh", "rank", "root cause"), rows) if rows else None
    return Description("job", str(job.get("health", "?")), tuple(fields), table)


def _host(row: Row, index: Index) -> Description:
    host = next(h for h in index.hosts if h["id"] == row.ref)
    procs = host.get("procs", [])
    rows = tuple((p["proc"], str(p.get("procs")), str(p.get("pid")), str(p.get("state")),
                  str((p.get("counters") or {}).get("messages", 0))) for p in procs)
    fields = (("host", str(host.get("hostname"))), ("id", str(host["id"])),
              ("procs", str(len(procs))))
    return Description(f"host {host.get('hostname') or host['id']}", row.state, fields,
                       (("proc", "mesh", "pid", "state", "messages"), rows), whole=":procs")


def _procs(row: Row, index: Index) -> Description:
    procs = sorted((p for p in index.procs.values() if p["procs"] == row.ref),
                   key=lambda p: p["rank"])
    rows = tuple((str(p["rank"]), p["proc"], str(p.get("pid")), str(p.get("state")),
                  _status(p), str((p.get("counters") or {}).get("messages", 0)),
                  fmt_bytes((p.get("counters") or {}).get("bytes_sent"))) for p in procs)
    meshes = [m["name"] for m in index.meshes.values() if m.get("procs") == row.ref]
    fields = (("proc mesh", row.ref), ("procs", str(len(procs))),
              ("actor meshes", ", ".join(meshes) or "-"))
    return Description(row.label, row.state, fields,
                       (("rank", "proc", "pid", "state", "exit", "messages", "sent"), rows),
                       whole=":procs")


def _status(proc: Mapping[str, Any]) -> str:
    status = proc.get("status")
    if status is None:
        return "-"
    return f"signal {-status}" if status < 0 else f"exit {status}"


def _mesh(row: Row, index: Index, rates: Mapping[str, float]) -> Description:
    mesh = index.meshes[row.ref]
    actors = mesh.get("actors", [])  # of a folded mesh, only those not simply running
    states = index.mesh_states(mesh)
    fields: tuple[tuple[str, Any], ...] = (("mesh", mesh["name"]), ("id", mesh["mesh"]), ("class", str(mesh.get("class_name"))),
              ("extent", format_extent(mesh.get("extent"))), ("proc mesh", str(mesh.get("procs"))),
              ("owner", str(mesh.get("owner_id") or "root")),
              ("actors", ", ".join(f"{n} {s}" for s, n in sorted(states.items()))),
              ("messages/s", fmt_rate(row.rate)))
    service = mesh.get("service")
    if service:
        fields += (("service", f"{service.get('name')} {service_note(service)}"),
                   ("routed", str(service.get("routed", 0))))
    failed = [a for a in actors if a.get("state") == FAILED]
    rows = tuple((str(a["rank"]), root_cause(index.failure(mesh["mesh"], a["rank"]),
                                             a.get("failure"))) for a in failed)
    first = index.failure(mesh["mesh"], failed[0]["rank"]) if failed else None
    return Description(f"mesh {mesh['name']}", row.state, fields,
                       (("rank", "root cause"), rows) if rows else None,
                       root_cause(first, failed[0].get("failure")) if failed else None,
                       _report(first, failed[0]) if failed else None, whole=":actors")


def _actor(row: Row, index: Index, rates: Mapping[str, float],
           detail: Mapping[str, Any] | None = None) -> Description:
    mesh, actor = index.actors[row.ref]
    proc = index.procs.get(actor.get("proc", ""), {})
    fields = [("actor", row.label), ("class", str(mesh.get("class_name"))),
              ("point", format_extent({"labels": list(actor.get("point") or {}),
                                       "sizes": list((actor.get("point") or {}).values())})),
              ("state", row.state), ("proc", str(actor.get("proc"))),
              ("pid", str(proc.get("pid"))),
              ("host", str(proc.get("host") or proc.get("host_id"))),
              ("messages", str(actor.get("messages", 0))),
              ("messages/s", fmt_rate(rates.get(row.key))),
              ("queue depth", str(actor.get("queue_depth", 0))),
              ("latency p50", fmt_ms(actor.get("latency_p50_ms"))),
              ("last method", str(actor.get("last_method") or "-"))]
    for handler in actor.get("running") or []:
        fields.append(("now", f"in {handler['method']} for {handler['running_s']:.1f} s"
                              + (" STALLED (p: py-spy stack)" if handler.get("stalled") else "")
                              + f" · caller {handler.get('caller')}"
                              + (f" · trace {str(handler['trace_id'])[:16]}"
                                 if handler.get("trace_id") else "")))
    if actor.get("queued_methods"):
        fields.append(("queued", ", ".join(actor["queued_methods"])))
    table = _flight_table(detail, mesh, actor)
    session = index.sessions.get(row.key)
    if session:
        fields.append(("pdb", f"paused in {session.get('function')} line "
                              f"{session.get('lineno')} (press a to attach)"))
    if actor.get("state") != FAILED:
        return Description(row.label, row.state, tuple(fields), table)
    failure = index.failure(mesh["mesh"], actor["rank"])
    return Description(row.label, row.state, tuple(fields), table,
                       root_cause(failure, actor.get("failure")), _report(failure, actor))


FLIGHT_SHOWN = 12
"""Flight-recorder entries the detail pane shows (`monarch inspect` shows all 64)."""


def _flight_table(detail: Mapping[str, Any] | None, mesh: Mapping[str, Any],
                  actor: Mapping[str, Any]) -> Any:
    """The flight recorder (the last messages the actor handled, newest first) as a table."""
    if not detail or detail.get("mesh_id") != mesh.get("mesh") \
            or detail.get("rank") != actor.get("rank"):
        return None
    rows = tuple((time.strftime("%H:%M:%S", time.localtime(m["start"])), str(m["method"]),
                  str(m["sender"]), fmt_ms(m["duration_ms"]), str(m["outcome"]),
                  fmt_bytes(m["bytes"])) for m in (detail.get("recent") or [])[:FLIGHT_SHOWN])
    return (("start", "method", "sender", "ms", "outcome", "bytes"), rows) if rows else None


def _report(failure: Mapping[str, Any] | None, actor: Mapping[str, Any]) -> str:
    report = (failure or {}).get("report") or actor.get("failure") or ""
    extra = []
    if failure:
        for key in ("host", "pid", "exit_code", "signal"):
            if failure.get(key) is not None:
                extra.append(f"{key} {failure[key]}")
    head = ", ".join(extra)
    return f"{head}\n{report}".strip() if head else str(report)
