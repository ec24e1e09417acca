"""`monarch trace export` (a Perfetto / chrome://tracing file)."""

from __future__ import annotations

import json

import typer

from ._common import call, check_mesh_rank, client, note

trace_app = typer.Typer(help="Traces of the job's calls (spans joined across processes).",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")


@trace_app.command("export")
def export(ctx: typer.Context,
           output: str | None = typer.Option(None, "--output", "-o",
                                                help="File to write ('-': stdout; default "
                                                "monarch-trace-<job id>.json)."),
           mesh: str | None = typer.Option(None, "--mesh", help="Only spans of this mesh."),
           ) -> None:
    """Writes the stored spans as Chrome/Perfetto trace JSON (open in ui.perfetto.dev)."""
    admin = client(ctx)
    if mesh is not None:
        check_mesh_rank(call(admin.topology), mesh, None)
    trace = call(admin.trace, mesh=mesh)
    if output == "-":
        typer.echo(json.dumps(trace))
        return
    path = output or f"monarch-trace-{admin.info.get('job_id') or 'job'}.json"
    with open(path, "w") as f:
        json.dump(trace, f)
    spans = sum(1 for e in trace["traceEvents"] if e.get("ph") == "X")
    note(f"wrote {spans} spans to {path}")
