"""A resource table (`:meshes`, `:actors`, ...): the rows of `_resources.table`, refreshed with
each snapshot, `/` filtering them (a regular expression, `!` inverts), enter jumping to the
row's node in the tree, esc back."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from . import _resources as resources
from ._command_input import CommandInput
from ._filter import TextFilter
from ._styles import state_style


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

    def compose(self) -> ComposeResult:
        yield Static(id="resource-head")
        yield DataTable(id="resource-table", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="filter: a regular expression (!text inverts), esc clears",
                    id="resource-filter")
        yield CommandInput(id="resource-command")
        yield Footer()

    @property
    def data_table(self) -> DataTable[Any]:
        return self.query_one("#resource-table", DataTable)

    def on_mount(self) -> None:
        self.data_table.focus()
        self.show()

    def show(self) -> None:
        """Rebuilds the rows from the app's newest snapshot (the cursor stays on its row)."""
        app: Any = self.app
        jobs = _jobs() if self.kind == "jobs" else ()
        shown = resources.table(self.kind, app.snapshot, app.rates.rates, jobs)
        items = [i for i in shown.items if self.filter.matches_any(i.cells)]
        table = self.data_table
        if self.shown is None or self.shown.columns != shown.columns:
            table.clear(columns=True)
            table.add_columns(*shown.columns)
        row = table.cursor_row
        table.clear()
        state = shown.columns.index("STATE") if "STATE" in shown.columns else -1
        for item in items:
            table.add_row(*(Text(c, style=state_style(c)) if i == state else c
                            for i, c in enumerate(item.cells)))
        if items:
            table.move_cursor(row=min(row, len(items) - 1))
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

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
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


def _jobs() -> list[dict[str, Any]]:
    from monarch.admin import discover

    try:
        return list(discover())
    except OSError:
        return []
