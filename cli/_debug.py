"""`monarch debug`: the `monarch_dbg>` shell over the admin API (list, attach, cast, continue)."""

from __future__ import annotations

import sys

import typer

from ._common import admin_errors, client


def register(app: typer.Typer) -> None:
    app.command("debug")(debug)


def debug(ctx: typer.Context) -> None:
    """Drives the pdb sessions of actors paused in `breakpoint()` (type `help` inside)."""
    from monarch._actors._debug_shell import DebugShell  # imports the runtime: only when used

    admin = client(ctx)
    with admin_errors():
        try:
            DebugShell(admin, sys.stdin, sys.stdout).run()
        except KeyboardInterrupt:
            typer.echo("", err=True)
