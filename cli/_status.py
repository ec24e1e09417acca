"""`monarch status` (the tree: hosts → procs → actors) and `monarch ps` (one line per actor)."""

from __future__ import annotations

from typing import Any

import typer

from ._common import EXIT_FAILED, call, client, emit_json, paint, state


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("ps")(ps)


def status(ctx: typer.Context,
           as_json: bool = typer.Option(False, "--json", help="Print JSON (job + topology)."),
           ) -> None:
    """The job as a tree: hosts → procs → actors, with state, counters and failures.

    Exits 1 when the job has failures.
    """
    admin = client(ctx)
    job, topology = call(admin.job), call(admin.topology)
    if as_json:
        emit_json({"job": job, **topology})
    else:
        typer.echo("\n".join(render_status(job, topology)))
    if job["health"] != "ok":
        raise typer.Exit(EXIT_FAILED)


def ps(ctx: typer.Context,
       as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per actor)."),
       stalled: bool = typer.Option(False, "--stalled", help="Only actors with a handler "
                                    "running past the stall threshold (MONARCH_STALL_S)."),
       ) -> None:
    """One line per actor: mesh, rank, point, proc, pid, state, counters, and what it runs
    now (`in generate for 12.3 s`, amber when stalled)."""
    admin = client(ctx)
    rows = actor_rows(call(admin.topology))
    if stalled:
        rows = [r for r in rows if r["stalled"]]
    if as_json:
        emit_json(rows)
        return
    header = ["MESH", "RANK", "POINT", "PROC", "PID", "STATE", "MSGS", "P50MS", "QUEUE", "LAST",
              "NOW"]
    table = [[str(r[k] if r[k] is not None else "-") for k in
              ("mesh", "rank", "point", "proc", "pid", "state", "messages", "latency_p50_ms",
               "queue_depth", "last_method")] + [_now_text(r)] for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in table]) for i, h in enumerate(header)]
    typer.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for r, row in zip(rows, table):
        cells = [c.ljust(w) for c, w in zip(row, widths)]
        cells[5] = state(row[5]) + " " * (widths[5] - len(row[5]))
        if r["stalled"]:
            cells[10] = paint(row[10], "yellow", bold=True)
        typer.echo("  ".join(cells).rstrip())


def _now_text(row: dict[str, Any]) -> str:
    """`in generate for 12.3 s` (+ more tasks, + what waits), or `-` when idle."""
    running = row["running"]
    if not running:
        return "-"
    first = running[0]
    text = f"in {first['method']} for {first['running_s']:.1f} s"
    if len(running) > 1:
        text += f" (+{len(running) - 1} more)"
    if row["stalled"]:
        text += " stalled"
    if row["queued_methods"]:
        text += f"; queued {', '.join(row['queued_methods'][:3])}"
    return text


def actor_rows(topology: dict[str, Any]) -> list[dict[str, Any]]:
    """Every actor of every mesh as a flat row (with its proc's pid)."""
    pids = {p["proc"]: p["pid"] for h in topology["hosts"] for p in h["procs"]}
    return [{"mesh": m["name"], "mesh_id": m["mesh"], "class_name": m["class_name"],
             "rank": a["rank"], "point": _point(a["point"]), "proc": a["proc"],
             "pid": pids.get(a["proc"]), "state": a["state"], "messages": a["messages"],
             "latency_p50_ms": a["latency_p50_ms"], "queue_depth": a["queue_depth"],
             "last_method": a["last_method"], "failure": a["failure"],
             "actor_id": a.get("actor_id"), "running": a.get("running", []),
             "running_method": (a.get("running") or [{}])[0].get("method"),
             "running_s": (a.get("running") or [{}])[0].get("running_s"),
             "stalled": bool(a.get("stalled")), "queued_methods": a.get("queued_methods", [])}
            for m in topology["meshes"] for a in m["actors"]]


def render_status(job: dict[str, Any], topology: dict[str, Any]) -> list[str]:
    """The status tree as lines."""
    counts = job["counts"]
    health = paint(job["health"], {"ok": "green", "degraded": "yellow"}.get(job["health"], "red"),
                   bold=True)
    lines = [f"job {paint(job['job_id'], bold=True)}  pid {job['pid']}  host {job['hostname']}"
             f"  up {_duration(job['uptime_s'])}  health {health}",
             f"  {counts['hosts']} host(s), {counts['procs_live']}/{counts['procs']} procs live, "
             f"{counts['meshes']} mesh(es), {counts['actors']} actor(s), "
             f"{counts['failures']} failure(s)"]
    actors = _actors_by_proc(topology)
    for host in topology["hosts"]:
        lines.append(f"host {paint(host['hostname'] or host['id'], bold=True)} ({host['id']})")
        for i, proc in enumerate(host["procs"]):
            last = i == len(host["procs"]) - 1
            lines += _proc_lines(proc, actors.get(proc["proc"], []), last)
    lines += service_lines(topology.get("services", []), topology["meshes"])
    lines += weight_lines(topology.get("weights", []))
    if topology["failures"]:
        lines.append(paint(f"failures ({len(topology['failures'])}):", "red", bold=True))
        for f in topology["failures"]:
            where = f"{f['mesh_name']}[{f['rank']}]" if f.get("rank") is not None \
                else f["mesh_name"]
            lines.append(f"  {paint(where, 'red')} pid {f.get('pid')} on {f.get('host')}: "
                         f"{f.get('reason')}")
    return lines


def weight_lines(weights: list[dict[str, Any]]) -> list[str]:
    """One line per state dict of `monarch.weights`: its newest version, size and reads."""
    return [f"weights {paint(w['key'], bold=True)}: v{w['version']}, {_size(w['bytes'])}, "
            f"{w['reads']} read(s)" for w in weights]


def _size(nbytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000  # type: ignore[assignment]
    return f"{nbytes} B"


def service_lines(services: list[dict[str, Any]], meshes: list[dict[str, Any]]) -> list[str]:
    """One line per service (healthy replicas, load, retries) and one per replica."""
    names = {m["mesh"]: m["name"] for m in meshes}
    lines = []
    for svc in services:
        total = len(svc["replicas"])
        color = "green" if svc["healthy"] == total else "yellow" if svc["healthy"] else "red"
        healthy = paint(f"{svc['healthy']}/{total} healthy", color)
        if svc.get("state") == "stopped":
            healthy = state("stopped")
        lines.append(f"service {paint(svc['name'], bold=True)}  {healthy}  "
                     f"load {svc['load']}  retried {svc['retried']}  "
                     f"(router in {svc['router_proc']})")
        replaced: dict[Any, list[Any]] = {}
        for old in svc["replaced"]:
            replaced.setdefault(old["replica"], []).append(old)
        for i, rep in enumerate(svc["replicas"]):
            branch = "└─ " if i == total - 1 else "├─ "
            history = "".join(f"  (replaces {names.get(o['mesh'], o['mesh'])}: "
                              f"{state(o['state'])})" for o in replaced.get(rep["replica"], []))
            lines.append(f"{branch}replica {rep['replica']} {names.get(rep['mesh'], rep['mesh'])}"
                         f"  {state(rep['state'])}  load {rep['outstanding']}  "
                         f"routed {rep['routed']}{history}")
    return lines


def _proc_lines(proc: dict[str, Any], actors: list[tuple[dict, dict]], last: bool) -> list[str]:
    branch, cont = ("└─ ", "   ") if last else ("├─ ", "│  ")
    c = proc["counters"]
    point = f" {_point(proc['point'])}" if proc.get("point") else ""
    lines = [f"{branch}proc {proc['proc']}{point}  pid {proc['pid']}  {state(proc['state'])}"
             f"  msgs {c['messages']}"]
    for j, (mesh, actor) in enumerate(actors):
        sub = "└─ " if j == len(actors) - 1 else "├─ "
        p50 = actor["latency_p50_ms"]
        lines.append(
            f"{cont}{sub}{mesh['name']}[{actor['rank']}] {mesh['class_name']}  "
            f"{state(actor['state'])}  msgs {actor['messages']}"
            + (f"  p50 {p50:.3g}ms" if p50 is not None else "")
            + f"  queue {actor['queue_depth']}"
            + (f"  last {actor['last_method']}" if actor["last_method"] else "")
            + "".join("  " + _running(h) for h in actor.get("running", []))
            + (f"  queued {', '.join(actor['queued_methods'][:3])}"
               if actor.get("queued_methods") else ""))
        if actor["failure"]:
            pad = cont + ("   " if j == len(actors) - 1 else "│  ")
            reason = actor["failure"].splitlines()[-1].strip()
            lines.append(f"{pad}{paint('✗ ' + reason, 'red')}")
    return lines


def _running(h: dict[str, Any]) -> str:
    text = f"in {h['method']} for {h['running_s']:.1f} s"
    return paint(text + " stalled", "yellow", bold=True) if h.get("stalled") else text


def _actors_by_proc(topology: dict[str, Any]) -> dict[str, list[tuple[dict, dict]]]:
    out: dict[str, list[tuple[dict, dict]]] = {}
    for mesh in topology["meshes"]:
        for actor in mesh["actors"]:
            out.setdefault(actor["proc"], []).append((mesh, actor))
    return out


def _point(point: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in point.items()) or "-"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"
