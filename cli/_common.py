"""What every command shares: the client, JSON and text output, colours, errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

import typer

from monarch.admin import AdminClient, AdminError, NoJobError, connect

EXIT_FAILED, EXIT_USAGE, EXIT_NO_JOB = 1, 2, 3
T = TypeVar("T")


def client(ctx: typer.Context) -> AdminClient:
    """The client of the job chosen by the global options (exits 3 if there is none)."""
    opts = ctx.find_root().obj or {}
    try:
        chosen = connect(opts.get("addr"), opts.get("token"), opts.get("job"))
    except NoJobError as exc:
        fail(str(exc), EXIT_NO_JOB)
    except ValueError as exc:  # --addr that is not host:port
        fail(f"--addr: {exc}", EXIT_USAGE)
    if not opts.get("addr") and not opts.get("job"):
        say_which(chosen.info)
    return chosen


def say_which(info: dict[str, Any]) -> None:
    """When several jobs run, says on stderr which one a command acts on and how to pick."""
    from monarch.admin import discover

    running = discover()
    if len(running) > 1:
        import time

        started = time.strftime("%H:%M:%S", time.localtime(info.get("started") or 0))
        others = ", ".join(i["job_id"] for i in running if i["job_id"] != info.get("job_id"))
        note(f"monarch: {len(running)} jobs are running; this is {info.get('job_id')} (the "
             f"newest, pid {info.get('pid')}, started {started}); the others: {others}. "
             "Pick one with --job ID.")


@contextmanager
def admin_errors() -> Iterator[None]:
    """Turns AdminError into a message on stderr and a non-zero exit."""
    try:
        yield
    except AdminError as exc:
        fail(str(exc), EXIT_NO_JOB if exc.status is None else EXIT_FAILED)


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, with admin errors reported as by `admin_errors`."""
    with admin_errors():
        return fn(*args, **kwargs)
    raise AssertionError("unreachable")


def history_or_fail(job: str | None) -> Any:
    """The history of `job` (default: the newest), or exit 3 saying there is none (and when
    and why it was pruned, if it was)."""
    from monarch.admin import open_history

    try:
        return open_history(job)
    except FileNotFoundError as exc:
        if "was pruned" in str(exc):
            fail(str(exc), EXIT_NO_JOB)
        which = f"job {job!r}" if job else "monarch job"
        fail(f"no running {which} and no history of it (`monarch jobs` lists them)",
             EXIT_NO_JOB)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Prints `monarch: error: message` on stderr and exits with `code`."""
    typer.echo(f"monarch: error: {message}", err=True)
    raise typer.Exit(code)


def note(message: str) -> None:
    """A diagnostic line on stderr."""
    typer.echo(message, err=True)


def emit_json(value: Any) -> None:
    """Machine output on stdout."""
    typer.echo(json.dumps(value, indent=2, default=str))


def color_enabled() -> bool:
    """Colours on a terminal, unless NO_COLOR is set (https://no-color.org)."""
    return "NO_COLOR" not in os.environ and sys.stdout.isatty()


STATE_COLORS = {"running": "green", "failed": "red", "stopped": "bright_black",
                "stopping": "yellow", "starting": "cyan", "pass": "green", "slow": "yellow",
                "fail": "red", "ok": "green", "degraded": "yellow", "healthy": "green"}


def paint(text: str, color: str | None = None, bold: bool = False) -> str:
    """`text` in `color` when colours are on."""
    if not color_enabled() or (color is None and not bold):
        return text
    return typer.style(text, fg=color, bold=bold)


def state(text: str) -> str:
    """A state word in its colour (failed in red, running in green...)."""
    return paint(text, STATE_COLORS.get(text))


def check_mesh_rank(topology: dict[str, Any], mesh: str | None, rank: int | None) -> None:
    """Exits 1 saying what exists when `mesh` is no mesh of the job, or `rank` no rank of it
    (of any mesh, without one): a filter that matches nothing would print nothing and
    succeed."""
    meshes = topology["meshes"]
    found = find_mesh(topology, mesh) if mesh is not None else None
    if mesh is not None and found is None:
        names = sorted({m["name"] for m in meshes})
        fail(f"no mesh {mesh!r}; the job has: {', '.join(names) or 'none'}")
    if rank is not None:
        sizes = [len(m.get("actors") or []) for m in ([found] if found else meshes)]
        size = max(sizes, default=0)
        if not 0 <= rank < size:
            where = f"{found['name']} has" if found else "the job's largest mesh has"
            fail(f"no rank {rank}: {where} {size} rank{'s' if size != 1 else ''}")


def find_mesh(topology: dict[str, Any], mesh: str) -> dict[str, Any] | None:
    """The mesh with this id, or the newest with this name."""
    meshes = topology["meshes"]
    exact = [m for m in meshes if m["mesh"] == mesh]
    named = [m for m in meshes if m["name"] == mesh]
    return (exact or named or [None])[-1]
