"""A resource table (`:meshes`, `:actors`, ...): the rows of `_resources.table`, refreshed with
each snapshot, `/` filtering them (a regular expression, `!` inverts), enter jumping to the
row's node in the tree, esc back. The table is virtual (`_table.LineTable`): `:actors` of a
job of a thousand actors draws only the lines on screen, and only those whose row changed."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from . import _resources as resources
from ._command_input import CommandInput
from ._filter import TextFilter
from ._styles import state_style
from ._table import LineTable

MAX_WIDTH = 48
"""A column is at most this wide (a longer cell ends in an ellipsis), but the last."""


class ResourceTable(LineTable):
    """The rows (`_resources.Item`) of one resource; a column is as wide as its widest cell
    seen so far (widths only grow, so a changing figure does not redraw every line)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__([], **kwargs)
        self.state_column = -1

    def show(self, table: resources.Table, items: Sequence[resources.Item]) -> None:
        """Shows `items` (rows of `table`, filtered)."""
        titles = table.columns
        widths = [len(t) for t in titles]
        if [t for t, _ in self.columns] == list(titles):
            widths = [max(w, old) for w, (_, old) in zip(widths, self.columns)]
        for item in items:
            for i, cell in enumerate(item.cells[:len(widths)]):
                if len(cell) > widths[i]:
                    widths[i] = len(cell)
        widths = [min(w, MAX_WIDTH) for w in widths[:-1]] + widths[-1:]
        self.state_column = titles.index("STATE") if "STATE" in titles else -1
        self.set_rows(items, list(zip(titles, widths)))

    def cells(self, item: resources.Item) -> Sequence[Text]:
        return [Text(c, style=state_style(c)) if i == self.state_column else Text(c)
                for i, c in enumerate(item.cells)]

    def key_of(self, item: resources.Item) -> Hashable:
        return (item.kind, item.ref, item.cells[0] if item.cells else "")


class ResourceScreen(Screen[None]):
    """The table of one resource; the app calls `show()` on each snapshot."""

    BINDINGS = [Binding("escape", "back", "back"),
                Binding("slash", "filter", "filter"),
                Binding("enter", "jump", "go to it in the tree"),
                Binding("q", "app.quit", "quit", show=False)]

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.filter = TextFilter()
        self.shown: resources.Table | None = None
        self.items: list[resources.Item] = []
        """The rows shown (after the filter), top to bottom."""
        self.local: list[dict[str, Any]] = []
        """The rows of a resource read on this machine (`resources.LOCAL`), newest read."""
        self._reading = False

    def compose(self) -> ComposeResult:
        yield Static(id="resource-head")
        yield ResourceTable(id="resource-table")
        yield Input(placeholder="filter: a regular expression (!text inverts), esc clears",
                    id="resource-filter")
        yield CommandInput(id="resource-command")
        yield Footer()

    @property
    def data_table(self) -> ResourceTable:
        return self.query_one("#resource-table", ResourceTable)

    def on_mount(self) -> None:
        self.data_table.focus()
        self.show()
        if self.kind in resources.LOCAL:  # read off the UI thread (Slurm may take seconds)
            self._read_local()
            self.set_interval(LOCAL_READ_S, self._read_local)

    def _read_local(self) -> None:
        if not self._reading:
            self._reading = True
            self.run_worker(self._fetch_local, thread=True, exit_on_error=False)

    def _fetch_local(self) -> None:
        try:
            rows = _LOCAL_READERS[self.kind]()
        finally:
            self._reading = False
        self.app.call_from_thread(self._got_local, rows)

    def _got_local(self, rows: list[dict[str, Any]]) -> None:
        self.local = rows
        if self.is_attached:
            self.show()

    def show(self) -> None:
        """Rebuilds the rows from the app's newest snapshot (the cursor stays on its row)."""
        if not self.query("#resource-head"):
            return  # not composed yet, or its widgets already gone (being closed)
        app: Any = self.app
        shown = resources.table(self.kind, app.snapshot, app.rates.rates, self.local)
        items = [i for i in shown.items if self.filter.matches_any(i.cells)]
        self.data_table.show(shown, items)
        self.shown, self.items = shown, items
        where = f" · /{self.filter.text}" if self.filter.text else ""
        self.query_one("#resource-head", Static).update(Text.assemble(
            (f":{self.kind}", "bold"), f" · {len(items)} of {len(shown.items)}{where}",
            ("   enter: go to it · /: filter · esc: back", "dim")))

    # -- keys ------------------------------------------------------------------------------
    def action_filter(self) -> None:
        box = self.query_one("#resource-filter", Input)
        box.value = self.filter.text
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "resource-filter":
            return
        self.filter = TextFilter(event.value)
        self.show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "resource-filter":
            event.stop()
            self._close_filter()

    def on_key(self, event: events.Key) -> None:
        box = self.query_one("#resource-filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            box.value = ""
            self._close_filter()

    def _close_filter(self) -> None:
        self.query_one("#resource-filter", Input).remove_class("shown")
        self.data_table.focus()

    def on_line_table_chosen(self, event: LineTable.Chosen) -> None:
        event.stop()
        self.action_jump()

    def action_jump(self) -> None:
        """Back to the tree, on the node of the row under the cursor."""
        row = self.data_table.cursor_row
        item = self.items[row] if 0 <= row < len(self.items) else None
        if item is None or not item.kind:
            self.notify(f"a row of :{self.kind} has no node in the tree", severity="warning")
            return
        self.app.pop_screen()
        self.app.reveal(item.kind, item.ref)  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()


LOCAL_READ_S = 5.0
"""How often a resource read on this machine is read again while shown."""


def _jobs() -> list[dict[str, Any]]:
    from monarch.admin import discover

    try:
        return list(discover())
    except OSError:
        return []


def _allocations() -> list[dict[str, Any]]:
    from monarch.job import list_allocations

    try:
        return list(list_allocations())
    except OSError:
        return []


_LOCAL_READERS = {"jobs": _jobs, "allocations": _allocations}
