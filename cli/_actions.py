"""`monarch kill`, `stop`, `stack`, `break` and `diagnose`: acting on a running job."""

from __future__ import annotations

from typing import Any

import typer

from monarch.admin import AdminClient, SelectionError, select_ranks

from ._common import EXIT_FAILED, call, client, emit_json, fail, find_mesh, note, paint, state


def register(app: typer.Typer) -> None:
    app.command("kill")(kill)
    app.command("stop")(stop)
    app.command("stack")(stack)
    app.command("break")(break_next)
    app.command("diagnose")(diagnose)


SLICE_HELP = "Which ranks: 'gpus=0:2', 'hosts=0, gpus=0:4', 'gpus=(1,3)'; empty for all."


def kill(ctx: typer.Context,
         mesh: str | None = typer.Argument(None, help="Mesh name or id (or a proc mesh id); "
                                           "with --allocation, an allocation id."),
         selection: str = typer.Option("", "--slice", "-s", help=SLICE_HELP),
         sig: str = typer.Option("KILL", "--signal", help="Signal to send (KILL, TERM, INT...)."),
         allocation: bool = typer.Option(False, "--allocation", "-a", help="Kill an "
                                         "allocation (its workers and every proc on them): "
                                         "the one given, or this directory's."),
         old_job: bool = typer.Option(False, "--job", hidden=True),
         yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
         as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
         ) -> None:
    """Kills (SIGKILL) the processes of a slice of a mesh's ranks; the job sees failures.
    With --allocation, ends an allocation instead."""
    if old_job:  # once the flag's name: --job is the job id everywhere else
        note("monarch: `kill --job` is now `kill --allocation` (--job names a job id)")
    if allocation or old_job:
        _kill_allocation(mesh, yes)
        return
    if mesh is None:
        fail("which mesh? (`monarch ps` lists them; --allocation kills an allocation)", 2)
    admin = client(ctx)
    _confirm(admin, mesh, selection, f"Send SIG{sig.upper().removeprefix('SIG')} to", yes)
    result = call(admin.kill, mesh, selection, sig)
    if as_json:
        emit_json(result)
    else:
        for p in result["killed"]:
            typer.echo(f"killed {p['proc']} (rank {p['rank']}, pid {p['pid']}) "
                       f"with {result['signal']}")
        for p in result["skipped"]:
            note(f"skipped {p['proc']} (rank {p['rank']}): it is {p['state']}")
    if not result["killed"]:
        raise typer.Exit(EXIT_FAILED)


def _kill_allocation(allocation: str | None, yes: bool) -> None:
    """`monarch kill --allocation [ID]`: ends the allocation and forgets it."""
    import os

    from monarch.job import DEFAULT_JOB_PATH, job_load
    from monarch._jobs._allocation import load_job

    try:
        found = load_job(allocation) if allocation else job_load(DEFAULT_JOB_PATH)
    except FileNotFoundError:
        fail(f"no job here ({DEFAULT_JOB_PATH}); `monarch jobs` lists allocations", 3)
    except LookupError as exc:
        fail(str(exc), 3)
    running = found._running
    ident = getattr(running, "allocation_id", None) or allocation or DEFAULT_JOB_PATH
    if not yes:
        try:
            answer = typer.confirm(f"Kill allocation {ident} ({type(running).__name__})?",
                                   default=False, err=True)
        except typer.Abort:
            answer = False
        if not answer:
            fail("aborted (nothing was done; --yes skips the question)")
    found.kill()
    if allocation is None or _same_allocation(DEFAULT_JOB_PATH, ident):
        if os.path.exists(DEFAULT_JOB_PATH):
            os.remove(DEFAULT_JOB_PATH)
    typer.echo(f"killed allocation {ident}")


def _same_allocation(path: str, ident: str) -> bool:
    from monarch.job import job_load

    try:
        running = job_load(path)._running
    except Exception:  # noqa: BLE001 - no readable cache here: nothing to forget
        return False
    return getattr(running, "allocation_id", None) == ident


def stop(ctx: typer.Context,
         mesh: str = typer.Argument(..., help="Mesh name or id (or a proc mesh id)."),
         selection: str = typer.Option("", "--slice", "-s", help=SLICE_HELP),
         yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
         as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
         ) -> None:
    """Stops the processes of a slice of ranks gracefully (`__cleanup__` runs) and waits."""
    admin = client(ctx)
    _confirm(admin, mesh, selection, "Stop", yes)
    result = call(admin.stop, mesh, selection)
    if as_json:
        emit_json(result)
    else:
        for p in result["stopped"]:
            typer.echo(f"stopped {p['proc']} (rank {p['rank']}, pid {p['pid']})")
    if not result["done"]:
        fail("not every process exited in time")


def _confirm(admin: AdminClient, mesh: str, selection: str, verb: str, yes: bool) -> None:
    """Shows what the selection hits and asks (unless --yes); exits if the answer is no."""
    targets = _preview(admin, mesh, selection)
    if yes:
        return
    listing = ", ".join(f"{t['proc']} (rank {t['rank']}, pid {t['pid']})" for t in targets)
    prompt = f"{verb} {len(targets)} process(es) of {mesh}: {listing}?" if targets else \
        f"{verb} the selected processes of {mesh}?"
    try:
        answer = typer.confirm(prompt, default=False, err=True)
    except typer.Abort:
        answer = False  # end of input: no
    if not answer:
        fail("aborted (nothing was done; --yes skips the question)")


def _preview(admin: AdminClient, mesh: str, selection: str) -> list[dict[str, Any]]:
    topology = call(admin.topology)
    found = find_mesh(topology, mesh)
    if found is None:
        return []  # maybe a proc mesh id: the server decides
    try:
        ranks = select_ranks(selection, found["extent"]["labels"], found["extent"]["sizes"])
    except SelectionError as exc:
        fail(str(exc))
    pids = {p["proc"]: p["pid"] for h in topology["hosts"] for p in h["procs"]}
    actors = {a["rank"]: a for a in found["actors"]}
    return [{"rank": r, "proc": actors[r]["proc"], "pid": pids.get(actors[r]["proc"])}
            for r in ranks if r in actors]


def stack(ctx: typer.Context,
          mesh: str = typer.Argument(..., help="Mesh name or id, or a proc name "
                                     "('controller')."),
          rank: int | None = typer.Argument(None, help="Rank in the mesh."),
          group: bool = typer.Option(False, "--group", help="Every rank of the mesh (or of "
                                     "--slice): ranks grouped by identical stack, the odd "
                                     "ones out first."),
          selection: str = typer.Option("", "--slice", help="With --group: which ranks, e.g. "
                                        "'gpus=0:4'."),
          as_json: bool = typer.Option(False, "--json", help="With --group: print JSON."),
          ) -> None:
    """Prints a py-spy dump of the process running that actor (or of that proc); with
    --group, what every rank runs now, grouped."""
    admin = client(ctx)
    if group or selection:
        if rank is not None:
            fail("--group takes every rank of the mesh (or of --slice), not one rank")
        result = call(admin.stacks, mesh, selection)
        if as_json:
            emit_json(result)
            return
        for line in render_stack_groups(result):
            typer.echo(line)
        return
    if as_json:
        fail("--json goes with --group")
    proc = mesh
    if rank is not None or mesh != "controller":
        topology = call(admin.topology)
        procs = {p["proc"] for h in topology["hosts"] for p in h["procs"]}
        if mesh not in procs:
            found = find_mesh(topology, mesh)
            if found is None:
                fail(f"no mesh or proc {mesh!r}; `monarch ps` lists them")
            actor = next((a for a in found["actors"] if a["rank"] == (rank or 0)), None)
            if actor is None:
                fail(f"{found['name']} has no rank {rank}")
            proc = actor["proc"]
    note(f"py-spy dump of {proc}")
    typer.echo(call(admin.stack, proc).rstrip("\n"))


def render_stack_groups(result: dict[str, Any]) -> list[str]:
    """The groups of `monarch stack MESH --group`: a summary line each (the odd ones out
    first), then each group's stack, innermost frame last (the console's words)."""
    from monarch.console._format import frame_text, ranks_text, stack_group_text, stacks_headline

    groups = result["groups"]
    lines = [stacks_headline(result)] + [f"  {stack_group_text(g)}" for g in groups]
    for g in groups:
        if g["frames"]:
            lines += ["", f"{ranks_text(g['ranks'])}:"]
            lines += [f"  {frame_text(frame)}" for frame in g["frames"]]
    return lines


def break_next(ctx: typer.Context,
               mesh: str = typer.Argument(..., help="Mesh name or id."),
               rank: int = typer.Argument(..., help="Rank in the mesh."),
               ) -> None:
    """Makes an actor stop in pdb at its next message (then `monarch debug` attaches)."""
    result = call(client(ctx).break_next, mesh, rank)
    typer.echo(f"{mesh}[{rank}] on {result['proc']} breaks at its next message; "
               "attach with `monarch debug`")


def diagnose(ctx: typer.Context,
             as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
             ) -> None:
    """Pings the controller and every live proc; exits 1 unless all answer."""
    result = call(client(ctx).diagnose)
    if as_json:
        emit_json(result)
    else:
        for c in result["checks"]:
            latency = f"{c['latency_ms']:.1f} ms" if c["latency_ms"] is not None else "-"
            line = f"{state(c['status']).ljust(4)}  {c['check']:<16} {c['proc']:<28} {latency}"
            typer.echo(line + (f"  {c['error']}" if c["error"] else ""))
        for d in result["dead"]:
            typer.echo(f"{paint('dead', 'bright_black')}  {d['proc']:<45} {d['state']}")
        typer.echo(paint("ok", "green") if result["ok"] else paint("FAILED", "red"))
    if not result["ok"]:
        raise typer.Exit(EXIT_FAILED)
