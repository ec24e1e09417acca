"""`monarch top`: the Textual console of a running job (topology, logs, spans, transfers;
slice and kill, stop, py-spy, diagnostics, pdb attach).

`MonarchTop(client)` is the app over a `monarch.admin` client; `run(client)` runs it.
Importing this package imports no Textual (the CLI imports it only when the console starts).
"""

from __future__ import annotations

from typing import Any

__all__ = ["REFRESH_S", "run"]

REFRESH_S = 0.45
"""Seconds between the console's polls by default: a little over two refreshes a second (a
0.5 s beat gave 1.98-2.01 a second, on the line of the two it must keep). At 1,024 busy actors
a poll costs the controller ~17 ms of CPU (the topology ~13 of it), ~3.8 % of a core at this
rate; the metrics behind it are shipped every second (`_instrument.BULK_S`), while states,
failures and stalls are live."""


def run(client: Any, refresh: float = REFRESH_S, read_only: bool = False) -> None:
    """Runs the console on `client` until the user quits (`read_only`: kill, stop, break and
    attach refused)."""
    from .app import MonarchTop

    MonarchTop(client, refresh=refresh, read_only=read_only).run()
