"""`monarch logs [MESH] [--rank R] [-f]`: the merged log of every rank, in HLC order."""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from monarch import telemetry

from monarch.admin import NoJobError, connect

from ._common import (
    EXIT_NO_JOB, admin_errors, call, check_mesh_rank, fail, history_or_fail, note, paint,
    say_which,
)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)


def logs(ctx: typer.Context,
         mesh: str | None = typer.Argument(None, help="Only this mesh (name or id)."),
         rank: int | None = typer.Option(None, "--rank", "-r", help="Only this rank."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
         text: str | None = typer.Option(None, "--grep", "-g",
                                            help="Only lines containing this text."),
         limit: int = typer.Option(100, "--limit", "-n", min=0,
                                   help="How many recent lines first."),
         fold: bool = typer.Option(False, "--fold", help="Fold identical lines of all ranks "
                                   "(`[N similar log lines] [ranks 0-7] text`)."),
         as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
         job: str | None = typer.Option(None, "--job", help="Job id: a running one, or a "
                                        "finished or crashed one (read from its history)."),
         ) -> None:
    """Prints the recent log lines of the job (or of one mesh / rank); -f follows."""
    opts = ctx.find_root().obj or {}
    job = job or opts.get("job")
    try:
        admin = connect(opts.get("addr"), opts.get("token"), job)
    except NoJobError:
        if follow:
            fail(f"job {job or ''} is not running: nothing to follow", EXIT_NO_JOB)
        _print(history_logs(job, mesh, rank, text, limit), as_json, fold)
        return
    if not job and not opts.get("addr"):
        say_which(admin.info)
    if mesh is not None or rank is not None:
        check_mesh_rank(call(admin.topology), mesh, rank)
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


def history_logs(job: str | None, mesh: str | None, rank: int | None, text: str | None,
                 limit: int) -> list[dict[str, Any]]:
    """The last `limit` log lines of a job that is not running, from its history."""
    from monarch._history._client import HistoryClient
    from monarch.telemetry._sql import rows

    history = history_or_fail(job)
    note(f"job {history.job_id} is {history.info['state']}: reading its history")
    found = HistoryClient(history).logs(mesh=mesh, rank=rank, text=text, limit=limit)
    if not found and mesh is not None:  # no such mesh, or nothing it wrote?
        names = {r["mesh"] for r in rows(history.query("SELECT DISTINCT mesh FROM actors"))}
        if mesh not in names:
            fail(f"no mesh {mesh!r} in job {history.job_id}; it had: "
                 f"{', '.join(sorted(n for n in names if n)) or 'none'}")
    return found


def _print(lines: list[dict[str, Any]], as_json: bool, fold: bool) -> None:
    if as_json:
        for line in lines:
            typer.echo(json.dumps(line, default=str))
    elif fold:  # as the console folds and labels them
        for folded in telemetry.fold([_record(line) for line in lines]):
            first = folded.members[0].tags
            count = f"[{folded.count} similar log lines] " if folded.count > 1 else ""
            typer.echo(format_line({**first, "text": f"{count}{folded.text}"},
                                   who=folded.source))
    else:
        for line in lines:
            typer.echo(format_line(line))


def format_line(line: dict[str, Any], who: str | None = None) -> str:
    """`HH:MM:SS.mmm mesh[rank] text` (stderr lines in red), or the proc for non-actor lines;
    `who` replaces the writer (a folded line's `trainers[0-3]`)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(line["time"])) + \
        f".{int(line['time'] * 1000) % 1000:03d}"
    who = who or telemetry.source_label([line]) or "?"
    body = paint(line["text"], "red") if line["stream"] == "stderr" else line["text"]
    return f"{paint(stamp, 'bright_black')} {paint(who, 'cyan')} {body}"


def _record(line: dict[str, Any]) -> telemetry.LogRecord:
    return telemetry.LogRecord(line["hlc"], int(line["time"] * 1e9), line["stream"],
                               line["level"], line["text"], line)  # tags: the line itself
