"""The help overlay: every key, grouped (made from the model's key table)."""

from __future__ import annotations

from rich.table import Table
from textual import events
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ._keys import GRID_KEYS, KEYS, display_key

GROUPS = {"move": "Move", "select": "Select", "logs": "Logs", "act": "Act on the selection",
          "debug": "Debugger", "inspect": "Inspect", "app": "Console",
          "grid": "In the grid (v)"}

LEGEND = ("States: [green]● running[/]  [bold red]✖ failed[/] (root cause beside it)  "
          "[bold magenta]⏸ paused[/] in pdb  [bold #ffaf00]◷ stalled[/]  "
          "[yellow]◌ starting[/]  [dim]○ stopped[/]\n"
          "Grid shades: [dim]·[/] none ░ ▒ ▓ █ the mesh's maximum; [bold red]‹[/] "
          "lagging, [bold #ffaf00]![/] stalled\n"
          "Slice syntax: [b]hosts=0, gpus=0:4[/b] — index, a:b[:step] range or (a,b) list "
          "per dimension; blank = the whole mesh.\n"
          "Attached to pdb: type pdb commands; [b]c[/b] continues the actor, [b]detach[/b] "
          "or Ctrl-D gives the console back and leaves it paused.")


class HelpScreen(ModalScreen[None]):
    """Any key closes it."""

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_table())
            yield Static(LEGEND, id="help-legend")

    def on_mount(self) -> None:
        self.query_one("#help-box").border_title = "monarch top: keys (any key closes)"

    def on_key(self, event: events.Key) -> None:
        event.stop()
        self.dismiss(None)


def help_table() -> Table:
    """The keys, grouped as in `GROUPS`."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for group, title in GROUPS.items():
        table.add_row(f"[u]{title}[/u]", "")
        for key in (k for k in KEYS + GRID_KEYS if k.group == group):
            table.add_row(display_key(key.keys), key.description)
    return table
