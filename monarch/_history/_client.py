"""A read-only client over a job's history, with the methods `monarch top` uses of
`monarch.admin.AdminClient`: the console of a finished or crashed job (`monarch top --job ID`)
shows its last topology, what each actor ran when it ended, logs, spans and its flight
recorders, under a "finished"/"crashed" banner. Actions are refused (AdminError 409).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from ..telemetry import _derived, _services
from ..telemetry._derived import tensor_engines, weights
from ..telemetry._services import annotate, services
from ._runs import History

DERIVED_METRICS = tuple(sorted(_derived.METRICS | _services.METRICS))
"""The metrics a finished job's topology derives its weights, tensor engines and services
from (what those views read, named where they read it)."""
from .._client._admin import AdminError


class HistoryClient:
    """What `monarch top` reads, from `history`'s Parquet files (each call a SQL query)."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.info: dict[str, Any] = dict(history.info, address=str(history.path))

    def query(self, sql: str, limit: int | None = None) -> Any:
        """SQL over the history (a pyarrow Table)."""
        table = self.history.query(sql)
        return table if limit is None else table.slice(0, limit)

    def _rows(self, sql: str) -> list[dict[str, Any]]:
        from ..telemetry._sql import rows

        return rows(self.history.query(sql))

    def job(self) -> dict[str, Any]:
        """The job as it ended: state (finished, failed, crashed), counts, headline figures."""
        info, actors = self.info, self._rows("SELECT * FROM actors")
        ended = info.get("ended") or info.get("last_write") or info.get("started") or 0
        failed = sum(a["state"] == "failed" for a in actors)
        return {"job_id": info.get("job_id"), "pid": info.get("pid"),
                "hostname": info.get("hostname"), "address": info["address"],
                "started": info.get("started"), "uptime_s": ended - (info.get("started") or 0),
                "health": "failed" if info["state"] in ("crashed", "failed") or failed
                else "ok", "state": info["state"],
                "counts": {"hosts": len({a["host"] for a in actors}),
                           "procs": len({a["proc"] for a in actors}), "procs_live": 0,
                           "meshes": len({a["mesh_id"] for a in actors}),
                           "actors": len(actors), "failures": failed}}

    def topology(self) -> dict[str, Any]:
        """Hosts → procs and meshes → actors, rebuilt from the ``actors`` table."""
        actors = self._rows("SELECT * FROM actors ORDER BY mesh_id, rank")
        hosts: dict[str, dict[str, Any]] = {}
        meshes: dict[str, dict[str, Any]] = {}
        for a in actors:
            host = hosts.setdefault(a["host"] or "local", {"id": a["host"] or "local",
                                                           "hostname": a["host"], "procs": []})
            if a["proc"] not in {p["proc"] for p in host["procs"]}:
                host["procs"].append(_proc(a))
            mesh = meshes.setdefault(a["mesh_id"], {
                "mesh": a["mesh_id"], "name": a["mesh"], "class_name": a["actor_class"],
                "owner_id": None, "procs": _procs_of(a["proc"]), "actors": [],
                "extent": {"labels": [], "sizes": []}})
            mesh["actors"].append(_actor(a, self._ended))
        for mesh in meshes.values():  # the extent its actors' points span (it showed `{}`)
            mesh["extent"] = _extent([actor["point"] for actor in mesh["actors"]])
        points = self._metric_points(DERIVED_METRICS)
        found = services(points)
        annotate(list(meshes.values()), found)
        return {"hosts": list(hosts.values()), "meshes": list(meshes.values()),
                "failures": self.failures(), "weights": weights(points),
                "tensor_engines": tensor_engines(points), "services": found}

    def _metric_points(self, names: tuple[str, ...]) -> list[Any]:
        """The newest value of each series of the metrics `names` (the history keeps each
        flush's snapshot), as points: name, labels, value, source."""
        listed = ", ".join(f"'{n}'" for n in names)
        newest: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in self._rows(f"SELECT name, labels, value, time_ns, proc FROM metrics "
                              f"WHERE name IN ({listed})"):
            key = (row["name"], row["labels"], row["proc"])
            if key not in newest or row["time_ns"] >= newest[key]["time_ns"]:
                newest[key] = row
        return [SimpleNamespace(name=r["name"], labels=json.loads(r["labels"] or "{}"),
                                value=r["value"], source=r["proc"]) for r in newest.values()]

    @property
    def _ended(self) -> bool:
        return self.info.get("state") != "running"

    def failures(self) -> list[dict[str, Any]]:
        """Every failure recorded."""
        return [{"mesh": None, "mesh_name": f["mesh"], "rank": f["rank"],
                 "class_name": f["actor_class"], "proc": f["proc"], "host": f["host"],
                 "pid": f["pid"], "exit_code": f["exit_code"], "signal": f["signal"],
                 "reason": f["traceback"] or f["reason"], "report": f["reason"],
                 "time": f["time_ns"] / 1e9}
                for f in self._rows("SELECT * FROM failures ORDER BY time_ns")]

    def sessions(self) -> list[dict[str, Any]]:
        """No debugger sessions: the job has ended."""
        return []

    def spans(self, trace_id: str | None = None, mesh: str | None = None,
              limit: int = 200) -> list[dict[str, Any]]:
        """The newest spans, oldest first."""
        where = f"WHERE trace_id = {_quote(trace_id)}" if trace_id else (
            f"WHERE mesh = {_quote(mesh)}" if mesh else "")
        found = self._rows(f"SELECT * FROM spans {where} ORDER BY start_ns DESC "
                           f"LIMIT {int(limit)}")
        return [dict(s, attributes=json.loads(s["attributes"] or "{}"), source=s["proc"])
                for s in reversed(found)]

    def transfers(self, window: float = 10.0) -> dict[str, Any]:
        """No live throughput for an ended job."""
        empty = {"bytes": 0, "count": 0, "bytes_per_s": 0.0, "history": []}
        return {"window": window, "bucket_s": 1.0, "total": empty, "links": [], "meshes": [],
                "kinds": []}

    def logs(self, mesh: str | None = None, rank: int | None = None, text: str | None = None,
             since_hlc: int | None = None, limit: int = 500) -> list[dict[str, Any]]:
        """Log lines in HLC order (the last `limit`, or the first after `since_hlc`)."""
        where = ["1 = 1"]
        if mesh is not None:
            where.append(f"mesh = {_quote(mesh)}")
        if rank is not None:
            where.append(f"rank = {int(rank)}")
        if text is not None:
            where.append(f"strpos(text, {_quote(text)}) > 0")
        if since_hlc is not None:
            where.append(f"hlc > {int(since_hlc)}")
        order = "ASC" if since_hlc is not None else "DESC"
        found = self._rows(f"SELECT * FROM logs WHERE {' AND '.join(where)} "
                           f"ORDER BY hlc {order} LIMIT {int(limit)}")
        if since_hlc is None:
            found.reverse()
        return [{"hlc": r["hlc"], "time": r["time_ns"] / 1e9, "stream": r["stream"],
                 "level": r["level"], "text": r["text"], "mesh": r["mesh"], "rank": r["rank"],
                 "proc": r["proc"], "host": r["host"], "pid": r["pid"],
                 "tags": json.loads(r["tags"] or "{}")} for r in found]

    def actor(self, mesh: str, rank: int, limit: int = 64) -> dict[str, Any]:
        """One actor as it ended, with its flight recorder and status events."""
        found = self._rows(f"SELECT * FROM actors WHERE (mesh_id = {_quote(mesh)} OR mesh = "
                           f"{_quote(mesh)}) AND rank = {int(rank)} LIMIT 1")
        if not found:
            raise AdminError(f"no actor {mesh}[{rank}] in the history of this job", 404)
        a = found[0]
        actor = _quote(a["actor"])
        recent = self._rows(f"SELECT * FROM messages WHERE actor = {actor} "
                            f"ORDER BY start_ns DESC LIMIT {int(limit)}")
        events = self._rows(f"SELECT * FROM actor_status_events WHERE actor = {actor} "
                            "ORDER BY time_ns")
        return {"mesh": a["mesh"], "mesh_id": a["mesh_id"], "class_name": a["actor_class"],
                **_actor(a, self._ended),
                "recent": [{"method": m["method"], "sender": m["sender"],
                            "start": m["start_ns"] / 1e9, "duration_ms": m["duration_ms"],
                            "outcome": m["outcome"], "bytes": m["bytes"]} for m in recent],
                "events": [{"time": e["time_ns"] / 1e9, "event": e["event"],
                            "detail": e["detail"]} for e in events]}

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise AdminError(f"job {self.info.get('job_id')} has ended ({self.info['state']}): "
                         "its history is read-only", 409)

    kill = stop = stack = diagnose = break_next = continue_all = _refuse


def _procs_of(proc: str) -> str:
    return "ctl" if proc == "controller" else proc.rsplit("-", 1)[0]


def _proc(a: dict[str, Any]) -> dict[str, Any]:
    rank = a["proc"].rsplit("-", 1)[-1]
    return {"proc": a["proc"], "procs": _procs_of(a["proc"]),
            "rank": int(rank) if rank.isdigit() else 0, "pid": a["pid"],
            "state": "stopped" if a["state"] != "failed" else "failed", "host": a["host"],
            "status": None, "meshes": [a["mesh_id"]], "point": {},
            "counters": {"messages": a["messages"] or 0, "bytes_sent": 0,
                         "bytes_received": 0, "failures": 0}}


def _extent(points: list[dict[str, int]]) -> dict[str, list[Any]]:
    """The labels and sizes the points of a mesh's actors span."""
    labels = list(points[0]) if points and points[0] else []
    return {"labels": labels, "sizes": [max(p.get(label, 0) for p in points) + 1
                                        for label in labels]}


def _actor(a: dict[str, Any], ended: bool = True) -> dict[str, Any]:
    """One actor as the ``actors`` table saw it last; of a job that ended, one still running
    then is shown stopped (its process went with the job; a stalled or failed one stays so,
    and what it ran stays in `running`)."""
    state = a["state"]
    if ended and state in ("running", "starting", "stopping"):
        state = "stopped"
    running = [] if not a["running_method"] else [{
        "method": a["running_method"], "since": (a["running_since_ns"] or 0) / 1e9,
        "running_s": a["running_s"], "caller": a["caller"], "trace_id": a["trace_id"],
        "stalled": bool(a["stalled"])}]
    point = dict(p.split("=", 1) for p in (a["point"] or "").split(",") if "=" in p)
    return {"rank": a["rank"], "proc": a["proc"], "state": state, "actor_id": a["actor"],
            "label": "", "point": {k: int(v) for k, v in point.items() if v.isdigit()},
            "messages": a["messages"] or 0, "queue_depth": a["queue_depth"] or 0,
            "latency_p50_ms": a["latency_p50_ms"], "last_method": a["last_method"],
            "running": running, "queued_methods": [m for m in
                                                    (a["queued_methods"] or "").split(",") if m],
            "stalled": bool(a["stalled"]), "failure": a["failure"]}


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"
