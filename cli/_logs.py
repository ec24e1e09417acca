"""`monarch logs [MESH] [--rank R] [-f]`: the merged log of every rank, in HLC order."""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from monarch import telemetry

from ._common import admin_errors, call, client, paint


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)


def logs(ctx: typer.Context,
         mesh: str | None = typer.Argument(None, help="Only this mesh (name or id)."),
         rank: int | None = typer.Option(None, "--rank", "-r", help="Only this rank."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
         text: str | None = typer.Option(None, "--grep", "-g",
                                            help="Only lines containing this text."),
         limit: int = typer.Option(100, "--limit", "-n", help="How many recent lines first."),
         fold: bool = typer.Option(False, "--fold", help="Fold identical lines of all ranks "
                                   "(`[N similar log lines] [ranks 0-7] text`)."),
         as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
         ) -> None:
    """Prints the recent log lines of the job (or of one mesh / rank); -f follows."""
    admin = client(ctx)
    if not follow:
        lines = call(admin.logs, mesh=mesh, rank=rank, text=text, limit=limit)
        _print(lines, as_json, fold)
        return
    with admin_errors():
        stream = admin.follow_logs(mesh=mesh, rank=rank, history=limit)
        try:
            for line in stream:
                if text is None or text in line["text"]:
                    _print([line], as_json, False)
        except KeyboardInterrupt:
            pass
        finally:
            stream.close()


def _print(lines: list[dict[str, Any]], as_json: bool, fold: bool) -> None:
    if as_json:
        for line in lines:
            typer.echo(json.dumps(line, default=str))
    elif fold:
        for folded in telemetry.fold([_record(line) for line in lines]):
            typer.echo(str(folded))
    else:
        for line in lines:
            typer.echo(format_line(line))


def format_line(line: dict[str, Any]) -> str:
    """`HH:MM:SS.mmm mesh[rank] text` (stderr lines in red), or the proc for non-actor lines."""
    stamp = time.strftime("%H:%M:%S", time.localtime(line["time"])) + \
        f".{int(line['time'] * 1000) % 1000:03d}"
    who = f"{line['mesh']}[{line['rank']}]" if line.get("mesh") else (line.get("proc") or "?")
    body = paint(line["text"], "red") if line["stream"] == "stderr" else line["text"]
    return f"{paint(stamp, 'bright_black')} {paint(who, 'cyan')} {body}"


def _record(line: dict[str, Any]) -> telemetry.LogRecord:
    return telemetry.LogRecord(line["hlc"], int(line["time"] * 1e9), line["stream"],
                               line["level"], line["text"], line.get("tags") or {})
