"""`monarch trace export` (a Perfetto / chrome://tracing file) and `monarch query` (the store)."""

from __future__ import annotations

import json
from typing import Any

import typer

from ._common import call, client, emit_json, fail, note

trace_app = typer.Typer(help="Traces of the job's calls (spans joined across processes).",
                        no_args_is_help=True)

KINDS = ("logs", "spans", "metrics", "failures", "transfers")


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
    app.command("query")(query)


@trace_app.command("export")
def export(ctx: typer.Context,
           output: str | None = typer.Option(None, "--output", "-o",
                                                help="File to write ('-': stdout; default "
                                                "monarch-trace-<job id>.json)."),
           mesh: str | None = typer.Option(None, "--mesh", help="Only spans of this mesh."),
           ) -> None:
    """Writes the stored spans as Chrome/Perfetto trace JSON (open in ui.perfetto.dev)."""
    admin = client(ctx)
    trace = call(admin.trace, mesh=mesh)
    if output == "-":
        typer.echo(json.dumps(trace))
        return
    path = output or f"monarch-trace-{admin.info.get('job_id') or 'job'}.json"
    with open(path, "w") as f:
        json.dump(trace, f)
    spans = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    note(f"wrote {spans} spans to {path}")


def query(ctx: typer.Context,
          kind: str = typer.Argument(..., help="One of: " + ", ".join(KINDS)),
          mesh: str | None = typer.Option(None, "--mesh", help="Only this mesh."),
          rank: int | None = typer.Option(None, "--rank", help="Only this rank (logs)."),
          text: str | None = typer.Option(None, "--grep", help="Text to find (logs)."),
          trace_id: str | None = typer.Option(None, "--trace", help="Trace id (spans)."),
          where: list[str] = typer.Option([], "--where", "-w",
                                          help="key=value a record must match (repeatable; "
                                          "dotted keys reach nested fields)."),
          limit: int = typer.Option(100, "--limit", "-n", help="At most this many records."),
          window: float = typer.Option(10.0, "--window", help="Seconds (transfers)."),
          ) -> None:
    """Queries the job's telemetry store; prints JSON (one record per line)."""
    if kind not in KINDS:
        fail(f"unknown kind {kind!r}; one of: {', '.join(KINDS)}", 2)
    admin = client(ctx)
    if kind == "transfers":
        emit_json(call(admin.transfers, window))
        return
    fetch = {"logs": lambda: admin.logs(mesh=mesh, rank=rank, text=text, limit=limit),
             "spans": lambda: admin.spans(trace_id=trace_id, mesh=mesh, limit=limit),
             "metrics": lambda: admin.metrics(),
             "failures": lambda: admin.failures()}[kind]
    records = call(fetch)
    filters = [_parse_where(w) for w in where]
    if mesh and kind in ("metrics", "failures"):
        filters.append((("labels", "mesh") if kind == "metrics" else ("mesh_name",), mesh))
    chosen = [r for r in records if all(_matches(r, keys, value) for keys, value in filters)]
    for record in chosen[-limit:]:
        typer.echo(json.dumps(record, default=str))


def _parse_where(text: str) -> tuple[tuple[str, ...], str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        fail(f"--where expects key=value, got {text!r}", 2)
    return tuple(key.split(".")), value


def _matches(record: Any, keys: tuple[str, ...], value: str) -> bool:
    for key in keys:
        if isinstance(record, dict) and key in record:
            record = record[key]
        elif isinstance(record, dict) and key in record.get("attributes", {}):
            record = record["attributes"][key]
        else:
            return False
    return str(record) == value
