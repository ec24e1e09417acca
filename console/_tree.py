"""The topology tree: job → hosts → proc meshes → actor meshes → actors, with live counters."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding
from textual.message import Message

from ._format import fmt_ms, fmt_rate
from ._model import Row
from ._styles import STATE_GLYPHS, state_style
from ._table import LineTable

COLUMNS = ("node", "state", "msg/s", "queue", "p50", "", "last method")
WIDTHS = (10, 6, 5, 7, 30, 14)
"""Widths of the columns after the node column."""


class MeshTree(LineTable):
    """A table whose rows are the model's tree rows; the cursor is the console's selection.
    Virtual (`LineTable`): a refresh draws again only the visible rows that changed."""

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

    BINDINGS: ClassVar[list[Any]] = [
        Binding("enter", "toggle_row", "expand/collapse", show=False),
        Binding("right", "toggle_row(True)", "expand", show=False),
        Binding("left", "toggle_row(False)", "collapse", show=False)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(_columns(20), **kwargs)

    def on_mount(self) -> None:
        self.border_title = "topology"

    @property
    def rows_shown(self) -> list[Row]:
        return self.items

    @property
    def selected(self) -> Row | None:
        """The row under the cursor."""
        return self.cursor_item

    def cells(self, item: Row) -> tuple[Text, ...]:
        return _cells(item)

    def key_of(self, item: Row) -> str:
        return item.key

    def show(self, rows: list[Row]) -> None:
        """Shows `rows`, keeping the cursor on the same key (or the same position); the node
        column fits the longest label."""
        before = self.selected
        width = max((2 * r.depth + 4 + len(r.label) for r in rows), default=20)
        self.set_rows(rows, _columns(width))
        if before is not None and (before.key != getattr(self.selected, "key", None)):
            keys = [r.key for r in rows]
            if before.key in keys:
                self.move_cursor(row=keys.index(before.key))
        if self.selected != before:
            self.post_message(self.Selected(self.selected))

    def select_key(self, key: str) -> bool:
        """Moves the cursor to the row with `key`; False if it is not shown."""
        keys = [r.key for r in self.items]
        if key not in keys:
            return False
        self.move_cursor(row=keys.index(key))
        return True

    def on_line_table_cursor_moved(self, event: LineTable.CursorMoved) -> None:
        event.stop()
        self.post_message(self.Selected(self.selected))

    def on_line_table_chosen(self, event: LineTable.Chosen) -> None:
        event.stop()
        if self.selected is not None and self.selected.expandable:
            self.post_message(self.Toggled(self.selected))

    def action_toggle_row(self, expand: bool | None = None) -> None:
        if self.selected is not None and self.selected.expandable:
            self.post_message(self.Toggled(self.selected, expand))


def _columns(node_width: int) -> list[tuple[str, int]]:
    return list(zip(COLUMNS, (node_width, *WIDTHS)))


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
