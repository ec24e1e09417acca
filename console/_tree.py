"""The topology tree: job → hosts → proc meshes → actor meshes → actors, with live counters."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from ._format import fmt_ms, fmt_rate
from ._model import Row
from ._styles import STATE_GLYPHS, state_style

COLUMNS = ("node", "state", "msg/s", "queue", "p50", "", "last method")
WIDTHS = (10, 6, 5, 7, 30, 14)
"""Widths of the columns after the node column."""


class MeshTree(DataTable[Text]):
    """A table whose rows are the model's tree rows; the cursor is the console's selection."""

    class Selected(Message):
        """The cursor moved to another row."""

        def __init__(self, row: Row | None) -> None:
            self.row = row
            super().__init__()

    class Toggled(Message):
        """The user asked to expand or collapse a row."""

        def __init__(self, row: Row, expand: bool | None = None) -> None:
            self.row = row
            self.expand = expand
            """True: open, False: close, None: the other way round."""
            super().__init__()

    BINDINGS = [Binding("enter", "toggle_row", "expand/collapse", show=False),
                Binding("right", "toggle_row(True)", "expand", show=False),
                Binding("left", "toggle_row(False)", "collapse", show=False)]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)  # type: ignore[arg-type]
        self.rows_shown: list[Row] = []
        self._node_width = 0

    def on_mount(self) -> None:
        self.border_title = "topology"

    @property
    def selected(self) -> Row | None:
        """The row under the cursor."""
        if not self.rows_shown:
            return None
        return self.rows_shown[min(self.cursor_row, len(self.rows_shown) - 1)]

    def show(self, rows: list[Row]) -> None:
        """Shows `rows`, keeping the cursor on the same key (or the same position).

        Columns have fixed widths (the node column fits the longest label): updating a cell
        then costs one cell, not a re-measure of the whole column.
        """
        before = self.selected
        width = max((2 * r.depth + 4 + len(r.label) for r in rows), default=20)
        same = [r.key for r in rows] == [r.key for r in self.rows_shown]
        if same and width <= self._node_width:
            for old, new in zip(self.rows_shown, rows):
                if old != new:
                    for column, cell in zip(COLUMNS, _cells(new)):
                        self.update_cell(new.key, column or "note", cell)
            self.rows_shown = rows
        else:
            self._rebuild(rows, width)
            keys = [r.key for r in rows]
            if before is not None and before.key in keys:
                self.move_cursor(row=keys.index(before.key), animate=False)
        if self.selected != before:
            self.post_message(self.Selected(self.selected))

    def _rebuild(self, rows: list[Row], width: int) -> None:
        self.rows_shown = rows
        self.clear(columns=width != self._node_width or not self.columns)
        if not self.columns:
            self._node_width = width
            for name, size in zip(COLUMNS, (width, *WIDTHS)):
                self.add_column(name, key=name or "note", width=size)
        for row in rows:
            self.add_row(*_cells(row), key=row.key)

    def select_key(self, key: str) -> bool:
        """Moves the cursor to the row with `key`; False if it is not shown."""
        keys = [r.key for r in self.rows_shown]
        if key not in keys:
            return False
        self.move_cursor(row=keys.index(key), animate=False)
        return True

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Selected(self.selected))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.selected is not None and self.selected.expandable:
            self.post_message(self.Toggled(self.selected))

    def action_toggle_row(self, expand: bool | None = None) -> None:
        if self.selected is not None and self.selected.expandable:
            self.post_message(self.Toggled(self.selected, expand))


def _cells(row: Row) -> tuple[Text, ...]:
    arrow = ("▾ " if row.expanded else "▸ ") if row.expandable else "  "
    mark = "◆ " if row.marked else ""
    style = state_style(row.state)
    name = Text("  " * row.depth + arrow + mark, style="dim")
    name.append(row.label, style="bold red" if row.state == "failed" else
                ("bold" if row.kind != "actor" else ""))
    state = Text(f"{STATE_GLYPHS.get(row.state, '?')} {row.state}", style=style)
    note_style = {"failed": "red", "paused": "magenta", "stalled": "bold #ffaf00"}.get(
        row.state, "dim")
    return (name, state, Text(fmt_rate(row.rate), justify="right"),
            Text("-" if row.queue is None else str(row.queue), justify="right"),
            Text(fmt_ms(row.p50_ms), justify="right"), Text(row.note, style=note_style),
            Text(row.last_method or "-"))
