"""The console's resources (k9s's `:pods`, `:deploy`): each a table made from one snapshot.

`:meshes`, `:procs`, `:actors`, `:services`, `:weights` (the versions of `monarch.weights`),
`:tensors` (the tensor engines: their workers' mesh, ops sent, remote tensors alive),
`:transfers`, `:spans`, `:jobs` and `:allocations` (those of `monarch.job`, with their hosts)
open a table of that resource; `/` filters its rows (`_filter.TextFilter`), enter jumps to the
row's node in the tree. Pure: `table(kind, snapshot, rates, local)` gives the columns and the
rows; what is read on this machine rather than from the job comes from the caller (`LOCAL`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._format import fmt_bytes
from ._model import (FAILED, Index, Snapshot, actor_key, format_extent, mesh_key, mesh_size,
                     running_note)

RESOURCES = ("meshes", "procs", "actors", "services", "weights", "tensors", "transfers",
             "spans", "jobs", "allocations")
"""The resource tables; `_command.COMMANDS` adds the views that are not tables."""

LOCAL = ("jobs", "allocations")
"""Resources read from this machine (`monarch.admin.discover()`, `monarch.job.
list_allocations()`), not from the job: the caller passes their rows."""


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """One row of a resource table: its cells, and the tree node it stands for (`kind` and
    `ref` as in `_model.Row`; "" when it has none)."""

    cells: tuple[str, ...]
    kind: str = ""
    ref: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Table:
    kind: str
    columns: tuple[str, ...]
    items: tuple[Item, ...]


def table(kind: str, snapshot: Snapshot, rates: Mapping[str, float] | None = None,
          local: Sequence[Mapping[str, Any]] = ()) -> Table:
    """The table of resource `kind` (one of `RESOURCES`).

    Raises:
        ValueError: an unknown resource.
    """
    if kind not in RESOURCES:
        raise ValueError(f"unknown resource {kind!r}; one of {', '.join(RESOURCES)}")
    index = Index(snapshot)
    columns, items = _BUILDERS[kind](index, snapshot, rates or {}, local)
    return Table(kind, columns, tuple(items))


def _meshes(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
            jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    items = []
    for mesh in index.meshes.values():
        states = index.mesh_states(mesh)
        failed = states.get(FAILED, 0)
        worst = FAILED if failed else _most_common(states)
        items.append(Item((mesh["name"], str(mesh.get("class_name", "")).rsplit(".", 1)[-1],
                           format_extent(mesh.get("extent")), str(mesh_size(mesh)),
                           worst, str(failed), f"{_mesh_rate(mesh, rates):.1f}",
                           str(_mesh_queue(mesh)), str(mesh.get("procs", ""))),
                          "mesh", mesh["mesh"]))
    return ("NAME", "CLASS", "EXTENT", "RANKS", "STATE", "FAILED", "MSG/S", "QUEUED",
            "PROC MESH"), items


def _mesh_rate(mesh: Mapping[str, Any], rates: Mapping[str, float]) -> float:
    """messages/s of a mesh: its actors' rates, or its folded rows' (by host)."""
    if "folded" in mesh:
        return sum(rates.get(mesh_key(host, mesh["mesh"]), 0.0) for host in mesh["folded"])
    return sum(rates.get(actor_key(mesh["mesh"], a["rank"]), 0.0)
               for a in mesh.get("actors", []))


def _mesh_queue(mesh: Mapping[str, Any]) -> int:
    """Messages queued in a mesh's actors (folded or not)."""
    if "folded" in mesh:
        return sum(int(h.get("queue_depth") or 0) for h in mesh["folded"].values())
    return sum(a.get("queue_depth") or 0 for a in mesh.get("actors", []))


def _procs(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
           jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    items = [Item((p["proc"], str(p.get("procs", "")), str(p.get("rank", "")),
                   str(p.get("host", "")), str(p.get("pid", "")), str(p.get("state", "")),
                   str((p.get("counters") or {}).get("messages", "")),
                   ", ".join(str(m) for m in p.get("meshes") or [])),
                  "procs", str(p.get("procs", "")))
             for p in index.procs.values()]
    return ("PROC", "PROC MESH", "RANK", "HOST", "PID", "STATE", "MSGS", "MESHES"), items


def _actors(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
            jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    items = []
    for key, (mesh, actor) in index.actors.items():
        proc = index.procs.get(actor.get("proc", ""), {})
        point = ", ".join(f"{k}={v}" for k, v in (actor.get("point") or {}).items())
        p50 = actor.get("latency_p50_ms")
        items.append(Item((f"{mesh['name']}[{actor['rank']}]", index.actor_state(mesh, actor),
                           point, str(actor.get("proc", "")), str(proc.get("pid", "")),
                           f"{rates.get(key, 0.0):.1f}", str(actor.get("queue_depth") or 0),
                           "" if p50 is None else f"{p50:g}",
                           running_note(actor) if actor.get("running") else ""),
                          "actor", key))
    return ("ACTOR", "STATE", "POINT", "PROC", "PID", "MSG/S", "QUEUED", "P50 MS",
            "RUNNING"), items


def _services(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
              jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    items = []
    for mesh in index.meshes.values():
        service = mesh.get("service")
        if not service:
            continue
        items.append(Item((str(service.get("name", mesh["name"])), str(service.get("replica")),
                           mesh["name"], str(service.get("state", "")),
                           str(service.get("outstanding", 0)),
                           "yes" if service.get("current", True) else "replaced",
                           str(mesh_size(mesh))), "mesh", mesh["mesh"]))
    return ("SERVICE", "REPLICA", "MESH", "STATE", "OUTSTANDING", "CURRENT", "RANKS"), items


def _weights(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
             jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    found = (snapshot.topology or {}).get("weights") or []
    items = [Item((str(w["key"]), str(w.get("version", 0)), fmt_bytes(w.get("bytes", 0)),
                   str(w.get("reads", 0)))) for w in found]
    return ("KEY", "VERSION", "BYTES", "READS"), items


def _tensors(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
             local: Any) -> tuple[tuple[str, ...], list[Item]]:
    items = []
    for engine in (snapshot.topology or {}).get("tensor_engines") or []:
        mesh = index.meshes.get(engine["mesh"], {})
        states = index.mesh_states(mesh) if mesh else {}
        state = FAILED if FAILED in states else _most_common(states) if mesh else "gone"
        ops, batches = int(engine.get("ops", 0)), int(engine.get("batches", 0))
        items.append(Item((str(mesh.get("name", engine["mesh"])),
                           format_extent(mesh.get("extent")) if mesh else "",
                           str(mesh.get("procs", "")), state, str(ops), str(batches),
                           f"{ops / batches:.1f}" if batches else "",
                           str(engine.get("tensors", 0))),
                          "mesh" if mesh else "", engine["mesh"] if mesh else ""))
    return ("WORKERS", "EXTENT", "PROC MESH", "STATE", "OPS", "BATCHES", "OPS/BATCH",
            "TENSORS"), items


def _transfers(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
               jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    found = snapshot.transfers or {}
    items = [Item(("link", f"{link['src']} → {link['dst']}",
                   fmt_bytes(link["bytes_per_s"]) + "/s", fmt_bytes(link["bytes"]),
                   str(link["count"]))) for link in found.get("links", [])]
    items += [Item(("mesh", m["mesh"] or "-", fmt_bytes(m["bytes_per_s"]) + "/s",
                    fmt_bytes(m["bytes"]), str(m["count"]))) for m in found.get("meshes", [])]
    items += [Item(("kind", k["type"], fmt_bytes(k["bytes_per_s"]) + "/s", fmt_bytes(k["bytes"]),
                    str(k["count"]))) for k in found.get("kinds", [])]
    return ("BY", "WHAT", "RATE", f"BYTES ({found.get('window', 10):g} s)", "COUNT"), items


def _spans(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
           jobs: Any) -> tuple[tuple[str, ...], list[Item]]:
    items = []
    for span in sorted(snapshot.spans, key=lambda s: s.get("end_ns") or 0, reverse=True):
        where, ref, kind = "", "", ""
        if span.get("mesh") is not None:
            rank = span.get("rank")
            where = f"{span['mesh']}[{rank}]" if rank is not None else str(span["mesh"])
            named = [m for m in index.meshes.values() if m["name"] == span["mesh"]]
            if named and isinstance(rank, int):
                kind, ref = "actor", actor_key(named[-1]["mesh"], rank)
        ended = (span.get("end_ns") or 0) / 1e9
        items.append(Item((time.strftime("%H:%M:%S", time.localtime(ended)),
                           str(span.get("name", "")), where,
                           f"{span.get('duration_ms') or 0:g}", str(span.get("outcome") or ""),
                           str(span.get("trace_id", ""))[:16]), kind, ref))
    return ("ENDED", "NAME", "ACTOR", "MS", "OUTCOME", "TRACE"), items


def _jobs(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
          jobs: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, ...], list[Item]]:
    shown = (snapshot.job or {}).get("job_id")
    items = [Item((str(j.get("job_id", "")), "this console" if j.get("job_id") == shown else "",
                   str(j.get("pid", "")), str(j.get("hostname", "")), str(j.get("address", "")),
                   time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.get("started") or 0))))
             for j in jobs]
    return ("JOB", "", "PID", "HOST", "ADMIN API", "STARTED"), items


def _allocations(index: Index, snapshot: Snapshot, rates: Mapping[str, float],
                 rows: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, ...], list[Item]]:
    shown = str((snapshot.job or {}).get("job_id") or "")
    items = []
    for r in rows:
        clients = [c for c in str(r.get("client") or "").split(",") if c]
        client = "this job" if shown and shown in clients else ",".join(clients) or "none"
        started = r.get("started")
        items.append(Item((str(r.get("id", "")), str(r.get("type", "")),
                           str(r.get("state", "")), str(r.get("hosts", "")), client,
                           time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
                           if started else "", str(r.get("detail", "")))))
    return ("ALLOCATION", "TYPE", "STATE", "HOSTS", "CONTROLLERS", "CREATED", "WORKERS"), items


_BUILDERS = {"meshes": _meshes, "procs": _procs, "actors": _actors, "services": _services,
             "weights": _weights, "tensors": _tensors, "transfers": _transfers, "spans": _spans,
             "jobs": _jobs, "allocations": _allocations}


def _most_common(states: Mapping[str, int]) -> str:
    """The state most actors are in (`starting` when none)."""
    return max(states, key=lambda state: states[state]) if states else "starting"

