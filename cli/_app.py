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



def reflow(doc: str | None) -> str | None:
    """A docstring as help text: each paragraph's hard-wrapped lines joined, so the terminal
    wraps it at its own width (typer keeps every newline: at 80 columns each source line
    ended in a ragged half line). Indented lines and list items keep their own lines."""
    if not doc:
        return doc
    import inspect

    paragraphs: list[str] = []
    current: list[str] = []
    for line in inspect.cleandoc(doc).splitlines() + [""]:
        keep = line.startswith((" ", "-", "*", "$")) or not line.strip()
        if keep and current:
            paragraphs.append(" ".join(current))
            current = []
        if not line.strip():
            paragraphs.append("")
        elif keep:
            paragraphs.append(line)
        else:
            current.append(line.strip())
    text = "\n".join(paragraphs).strip()
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def _reflow_all(typer_app: typer.Typer) -> None:
    for command in typer_app.registered_commands:
        if command.callback is not None and command.help is None:
            command.callback.__doc__ = reflow(command.callback.__doc__)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_all(group.typer_instance)


_register_all()
_reflow_all(app)
