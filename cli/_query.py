"""`monarch query "SQL"` (DataFusion over the job's telemetry, live or from its history) and
`monarch inspect MESH RANK` (one actor: what it runs now, what waits, its flight recorder).
`monarch jobs` is in `_jobs.py`."""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from monarch.admin import AdminError, NoJobError, connect

from ._common import (
    EXIT_FAILED, EXIT_NO_JOB, call, client, emit_json, fail, history_or_fail, say_which, note,
    paint, state,
)

EXIT_USAGE = 2


def register(app: typer.Typer) -> None:
    app.command("query")(query)
    app.command("inspect")(inspect)


def query(ctx: typer.Context,
          sql: str = typer.Argument(..., help="One SQL statement over the tables actors, "
                                    "actor_status_events, messages, spans, logs, metrics, "
                                    "transfers, failures (columns: docs/QUERY.md)."),
          job: str | None = typer.Option(None, "--job", help="Job id: a running one, or a "
                                         "finished or crashed one (read from its history)."),
          as_json: bool = typer.Option(False, "--json", help="One JSON object per row."),
          limit: int = typer.Option(10_000, "--limit", "-n", help="At most this many rows."),
          ) -> None:
    """Runs SQL (Apache DataFusion) over the job's telemetry; prints a table (or JSON rows).

    Example: monarch query "SELECT mesh, method, count(*) FROM messages GROUP BY 1, 2"
    """
    from monarch.telemetry._sql import QueryError, rows

    try:
        table = run_query(ctx, sql, job, limit)
    except QueryError as exc:
        fail(str(exc), EXIT_USAGE)
    if as_json:
        for row in rows(table):
            typer.echo(json.dumps(row, default=str))
        return
    typer.echo(render_table(table.column_names, rows(table)))
    note(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")


def run_query(ctx: typer.Context, sql: str, job: str | None, limit: int) -> Any:
    """The result of `sql` on the live job, or on the job's history when it is not running.

    Raises:
        QueryError: the engine refused the statement (a live job's 400 too).
    """
    from monarch.telemetry._sql import QueryError

    opts = ctx.find_root().obj or {}
    job = job or opts.get("job")
    try:
        admin = connect(opts.get("addr"), opts.get("token"), job)
    except NoJobError:
        history = history_or_fail(job)
        note(f"job {history.job_id} is {history.info['state']}: reading its history "
             f"({history.path})")
        return history.query(sql).slice(0, limit)
    if not job and not opts.get("addr"):
        say_which(admin.info)
    try:
        return admin.query(sql, limit=limit)
    except AdminError as exc:
        if exc.status == 400:
            raise QueryError(str(exc)) from None
        fail(str(exc), EXIT_NO_JOB if exc.status is None else EXIT_FAILED)


def render_table(columns: list[str], rows: list[dict[str, Any]], width: int = 60) -> str:
    """Rows as an aligned text table (cells cut at `width` characters)."""
    cells = [[_cell(row.get(c), width) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any, width: int) -> str:
    text = "NULL" if value is None else (f"{value:.6g}" if isinstance(value, float)
                                         else str(value))
    text = text.replace("\n", "⏎")
    return text if len(text) <= width else text[:width - 1] + "…"


def inspect(ctx: typer.Context,
            mesh: str = typer.Argument(..., help="Mesh name or id."),
            rank: int = typer.Argument(..., help="Rank in the mesh."),
            as_json: bool = typer.Option(False, "--json", help="Print JSON."),
            limit: int = typer.Option(64, "--limit", "-n", help="Messages of the flight "
                                      "recorder to show (it keeps 64)."),
            ) -> None:
    """One actor: state, what it runs now (and for how long), what waits behind it, its
    flight recorder (the last messages it handled) and its status events."""
    admin = client(ctx)
    actor = call(admin.actor, mesh, rank, limit)
    if as_json:
        emit_json(actor)
        return
    typer.echo("\n".join(render_actor(actor)))


def render_actor(a: dict[str, Any]) -> list[str]:
    """`monarch inspect`'s text."""
    lines = [f"{paint(a['mesh'], bold=True)}[{a['rank']}] {a['class_name']}  "
             f"{state(a['state'])}  proc {a['proc']}  msgs {a['messages']}"
             f"  queue {a['queue_depth']}"]
    for h in a["running"]:
        lines.append("  " + running_text(h) + f"  (caller {h['caller']}"
                     + (f", trace {h['trace_id']}" if h.get("trace_id") else "") + ")")
    if not a["running"]:
        lines.append("  idle")
    if a["queued_methods"]:
        lines.append(f"  queued: {', '.join(a['queued_methods'])}")
    if a.get("failure"):
        lines.append(paint("  " + a["failure"].splitlines()[-1].strip(), "red"))
    lines.append(f"flight recorder ({len(a['recent'])} newest first):")
    lines.append(f"  {'START':<12}  {'METHOD':<20}  {'SENDER':<24}  {'MS':>9}  OUTCOME  BYTES")
    for m in a["recent"]:
        start = time.strftime("%H:%M:%S", time.localtime(m["start"])) + \
            f".{int(m['start'] * 1000) % 1000:03d}"
        outcome = paint(m["outcome"], "red" if m["outcome"] != "ok" else None)
        lines.append(f"  {start:<12}  {m['method']:<20}  {m['sender']:<24}  "
                     f"{m['duration_ms']:>9.3f}  {outcome:<7}  {m['bytes']}")
    if a.get("events"):
        lines.append("status events:")
        for e in a["events"]:
            when = time.strftime("%H:%M:%S", time.localtime(e["time"]))
            lines.append(f"  {when}  {e['event']}" + (f"  {e['detail']}" if e["detail"] else ""))
    return lines


def running_text(h: dict[str, Any]) -> str:
    """`in generate for 12.3 s`, in amber (with `stalled`) past the stall threshold."""
    text = f"in {h['method']} for {h['running_s']:.1f} s"
    return paint(text + " (stalled)", "yellow", bold=True) if h.get("stalled") else text
