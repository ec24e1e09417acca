"""The `monarch` command: a typer app whose commands live one concern per module.

Each module in `COMMAND_MODULES` defines `register(app)` (or decorates `monarch.cli._app.app`
directly when imported); a module that is not there is skipped, so `_top` (`monarch top`,
`monarch demo`) can come from the console's side without touching this file.
Global options (`--addr`, `--token`, `--job`) select the job; see `_common.client`.
Exit codes: 0 ok, 1 the action failed or the job is unhealthy, 2 bad usage, 3 no job reachable.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="monarch",
    help="Inspect and act on a running monarch job (found in your run directory).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = ("_status", "_logs", "_actions", "_debug", "_trace", "_query", "_jobs",
                   "_top")


@app.callback()
def _global(
    ctx: typer.Context,
    addr: str | None = typer.Option(None, "--addr", help="host:port of the admin API "
                                       "(default: found in the run directory)."),
    token: str | None = typer.Option(None, "--token", envvar="MONARCH_ADMIN_TOKEN",
                                        help="The admin API token (default: from admin.json)."),
    job: str | None = typer.Option(None, "--job", help="Job id, when several run "
                                      "(default: the newest)."),
) -> None:
    ctx.obj = {"addr": addr, "token": token, "job": job}


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"monarch.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"monarch.cli.{name}":
                continue
            raise
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_all()
