"""`monarch top`: the Textual console of a running job (topology, logs, spans, transfers;
slice and kill, stop, py-spy, diagnostics, pdb attach).

`MonarchTop(client)` is the app over a `monarch.admin` client; `run(client)` runs it.
Importing this package imports no Textual (the CLI imports it only when the console starts).
"""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def run(client: Any, refresh: float = 0.5, read_only: bool = False) -> None:
    """Runs the console on `client` until the user quits (`read_only`: kill, stop, break and
    attach refused)."""
    from .app import MonarchTop

    MonarchTop(client, refresh=refresh, read_only=read_only).run()
