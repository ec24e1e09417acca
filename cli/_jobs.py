"""`monarch jobs`, `monarch apply`, `monarch exec`: jobs and their allocations.

`monarch jobs` is one table built from row sources (`ROW_SOURCES`): the jobs of this run
directory (running controllers, and ended jobs whose history is kept, for post-mortems), and
the allocations on record (ProcessJob / SlurmJob workers, with the controllers attached to
them, or none). A source is a function that returns rows with these keys:

    kind     "controller" (running), "job" (ended, with a history), "allocation"
    id       what other commands take (`--job ID`, `monarch kill --allocation ID`)
    type     the job's class or the script
    state    running / pending / dead / stale (a Slurm job no longer queued) / unknown (Slurm
             did not answer) / finished / failed / crashed ...
    pid      the controller's pid (None for allocations)
    client   the job ids of the controllers attached to an allocation ("" when none)
    hosts    "trainers=2 gen=1"
    started  epoch seconds
    detail   an address, a Slurm job id...
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import typer

from ._common import EXIT_FAILED, emit_json, fail, note, paint, state

JobRow = dict[str, Any]
COLUMNS = ("kind", "id", "type", "state", "pid", "client", "hosts", "started", "detail")


def controller_rows() -> list[JobRow]:
    """The jobs of this run directory: running controllers (scripts), and ended ones whose
    history is kept (`monarch._history._runs`: finished, failed, crashed), for post-mortems."""
    from monarch._history._runs import job_rows as history_rows

    return [{"kind": "controller" if r["state"] == "running" else "job",
             "id": r["job_id"], "type": "script", "state": r["state"], "pid": r["pid"],
             "client": "", "hosts": "", "started": r["started"],
             "detail": _detail(r), **r}
            for r in history_rows()]


def _detail(row: JobRow) -> str:
    """Where to look at a job: its admin address, or how it ended and its history."""
    if row.get("admin"):
        return str(row["admin"])
    ended = f"exit {row['exit_code']}: {row['reason']} " if row.get("exit_code") else ""
    return ended + (row.get("history") or "")


def allocation_rows() -> list[JobRow]:
    """The allocations on record (see `monarch.job.list_allocations`)."""
    from monarch.job import list_allocations

    return list_allocations()


ROW_SOURCES: list[Callable[[], list[JobRow]]] = [controller_rows, allocation_rows]
"""Where `monarch jobs` rows come from; each returns rows with the keys of `COLUMNS`."""


def job_rows() -> list[JobRow]:
    """Every row of every source, oldest first."""
    rows = [row for source in ROW_SOURCES for row in source()]
    return sorted(rows, key=lambda r: r.get("started") or 0)


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs)
    app.command("apply")(apply)
    app.command("exec", context_settings={"allow_interspersed_args": False})(exec_)


def jobs(as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per row)."),
         live: bool = typer.Option(False, "--live", help="Hide dead allocations."),
         ) -> None:
    """Jobs of this run directory: running controllers and allocations, with or without a
    client attached."""
    rows = [r for r in job_rows() if not (live and r["state"] in ("dead", "gone", "stale"))]
    if as_json:
        emit_json([{k: r.get(k) for k in (*COLUMNS, *r)} for r in rows])
        return
    if not rows:
        note("no jobs (`monarch apply job.py` keeps an allocation; scripts show while they run)")
        return
    table = [[_cell(r, k) for k in COLUMNS] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in table]) for i, c in enumerate(COLUMNS)]
    typer.echo("  ".join(c.upper().ljust(w) for c, w in zip(COLUMNS, widths)).rstrip())
    for row in table:
        cells = [c.ljust(w) for c, w in zip(row, widths)]
        cells[3] = state(row[3]) + " " * (widths[3] - len(row[3]))
        typer.echo("  ".join(cells).rstrip())


def _cell(row: JobRow, key: str) -> str:
    value = row.get(key)
    if key == "started" and value:
        return time.strftime("%m-%d %H:%M:%S", time.localtime(value))
    if key == "client" and row.get("kind") == "allocation" and not value:
        return "-"
    return "-" if value in (None, "") else str(value)


def apply(spec: str | None = typer.Argument(None, help="The job: a Python file defining it "
                                               "(`job = ProcessJob(...)`) or `module.attr`; "
                                               "default: the one applied last here."),
          ) -> None:
    """Allocates the job (or finds its live allocation) and keeps it after this command ends;
    scripts of this directory then attach to it through `.monarch/job_state.pkl`."""
    from monarch._jobs._project import import_job
    from monarch.job import load_current_job, set_current_job

    try:  # a spec is recorded only once it loads: a typo is not remembered for the next run
        job = import_job(_spec_path(spec)) if spec is not None else load_current_job()
    except Exception as exc:  # noqa: BLE001 - a user's file: say what went wrong
        fail(f"could not load the job: {type(exc).__name__}: {exc}")
    if spec is not None:
        set_current_job(spec)
    from monarch._jobs._trait import CachedRunning

    start = time.monotonic()
    hosts = job.state()._hosts
    reused = isinstance(job._status, CachedRunning)
    for name, mesh in hosts.items():
        procs = mesh.spawn_procs(name=f"ready-{name}")
        procs.initialized.get(timeout=300)
        procs.stop().get(timeout=60)
    running = job._running
    ident = getattr(running, "allocation_id", None) or type(running).__name__
    meshes = " ".join(f"{name}={len(mesh)}" for name, mesh in hosts.items())
    typer.echo(f"{'reused' if reused else 'applied'} {type(running).__name__} {ident}: "
               f"{meshes} ({time.monotonic() - start:.1f}s); `monarch kill --allocation` ends it")


def _spec_path(spec: str) -> str:
    """`spec` as `set_current_job` records it (a file: its absolute path)."""
    import os
    from pathlib import Path

    return str(Path(spec).resolve()) if spec.endswith(".py") or os.path.isfile(spec) else spec


def exec_(cmd: list[str] = typer.Argument(..., help="The command (one argument: a shell "
                                          "line, several: a command and its arguments)."),
          mesh: str | None = typer.Option(None, "--mesh", "-m", help="Every host of this mesh."),
          every: bool = typer.Option(False, "--all", help="Every host of every mesh."),
          allocation: str | None = typer.Option(None, "--allocation", "-a",
                                                help="An allocation id (`monarch jobs`); "
                                                "default: this directory's job."),
          ) -> None:
    """Runs a shell command on the job's hosts (default: the first host of the first mesh),
    streaming its output; exits with the largest exit code."""
    from monarch._jobs._bash import command_script
    from monarch._jobs._exec import stream_command

    if mesh is not None and every:
        fail("--mesh and --all exclude each other", 2)
    hosts = _job_hosts(allocation)
    if mesh is not None and mesh not in hosts:
        fail(f"no mesh {mesh!r}; the job has {', '.join(hosts)}")
    if every:
        targets = list(hosts.items())
    elif mesh is not None:
        targets = [(mesh, hosts[mesh])]
    else:
        first = next(iter(hosts))
        only = hosts[first]
        targets = [(first, only.slice(hosts=0) if "hosts" in only.sizes else only)]
    several = sum(len(m) for _, m in targets) > 1
    script = command_script(list(cmd), None, None, None)

    def on_line(label: str, stream: str, text: str) -> None:
        out = sys.stderr if stream == "err" else sys.stdout
        out.write(f"[{label}] {text}" if several else text)
        out.flush()

    codes = stream_command(targets, script, on_line)
    failed = {label: code for label, code in codes.items() if code}
    for label, code in sorted(failed.items()):
        note(paint(f"{label}: exit {code}", "red"))
    if failed:
        raise typer.Exit(max(failed.values()) if max(failed.values()) < 256 else EXIT_FAILED)


def _job_hosts(allocation: str | None) -> dict[str, Any]:
    """The host meshes of the chosen allocation (attaching this process to its workers).
    Unlike `monarch apply`, this never allocates: it runs where an allocation lives."""
    from monarch.job import DEFAULT_JOB_PATH, job_load
    from monarch._jobs._allocation import load_job

    try:
        job = load_job(allocation) if allocation is not None else job_load(DEFAULT_JOB_PATH)
    except FileNotFoundError:
        fail(f"no allocation here ({DEFAULT_JOB_PATH}): `monarch apply job.py` makes one, "
             "`monarch jobs` lists them", 3)
    except LookupError as exc:
        fail(str(exc), 3)
    running = job._running
    if running is None or not running._is_running():
        fail("the allocation is gone (`monarch apply` makes a new one)", 3)
    return dict(job.state(cached_path=None)._hosts)
