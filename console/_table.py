"""A virtual table: only the lines on screen are drawn, and a line is drawn again only when its
row changed (issue 32: a job of a thousand actors refreshing twice a second).

Textual's DataTable re-renders every visible cell after any `update_cell` (its cell cache is
keyed on a table-wide update count), through Rich's padding and measuring: ~1 ms a cell here,
so a 40-line pane of 7 columns took a quarter of a second a refresh. `LineTable` keeps a strip
per row, keyed on the row's value (rows are frozen dataclasses or tuples: equal means
unchanged), builds it from the row's cells in one Text, and draws the visible window of its
rows from the cache (Textual's line API: `render_line`). The cursor is a row index; the first
line is the header.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LineTable(ScrollView, can_focus=True):
    """Rows of cells under a header; subclasses say what a row's cells are (`cells`)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"line-table--header", "line-table--cursor"}
    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        & > .line-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus > .line-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[Any]] = [
        Binding("up", "cursor_up", "up", show=False),
        Binding("down", "cursor_down", "down", show=False),
        Binding("pageup", "page_up", "page up", show=False),
        Binding("pagedown", "page_down", "page down", show=False),
        Binding("home", "first", "first", show=False),
        Binding("end", "last", "last", show=False),
        Binding("enter", "choose", "choose", show=False)]

    class CursorMoved(Message):
        """The cursor is on another row (or the rows under it changed)."""

        def __init__(self, table: LineTable) -> None:
            self.table = table
            super().__init__()

    class Chosen(Message):
        """Enter, or a click on the row under the cursor."""

        def __init__(self, table: LineTable, index: int) -> None:
            self.table = table
            self.index = index
            super().__init__()

    def __init__(self, columns: Sequence[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.columns = list(columns)
        """(title, width) of each column, in order."""
        self.items: list[Any] = []
        self.cursor_row = 0
        self._strips: dict[Hashable, tuple[Any, int, Strip]] = {}
        """Row key -> (the row it was drawn from, the width, its strip)."""

    # -- what subclasses say -----------------------------------------------------------------
    def cells(self, item: Any) -> Sequence[Text]:
        """The row's cells, one Text per column (a cell's `justify` aligns it)."""
        raise NotImplementedError

    def key_of(self, item: Any) -> Hashable:
        """What identifies a row across refreshes (default: its place)."""
        return id(item)

    # -- rows --------------------------------------------------------------------------------
    def set_rows(self, items: Sequence[Any], columns: Sequence[tuple[str, int]] | None = None
                 ) -> None:
        """Shows `items`; lines whose row did not change are not drawn again."""
        if columns is not None and list(columns) != self.columns:
            self.columns = list(columns)
            self._strips.clear()
        self.items = list(items)
        keys = {self.key_of(item) for item in self.items}
        if len(self._strips) > 2 * len(keys) + 64:  # rows gone for good
            self._strips = {k: v for k, v in self._strips.items() if k in keys}
        self.virtual_size = Size(self.total_width, len(self.items) + 1)
        self.cursor_row = max(0, min(self.cursor_row, len(self.items) - 1))
        self.refresh()

    @property
    def total_width(self) -> int:
        return sum(width for _, width in self.columns) + max(len(self.columns) - 1, 0)

    @property
    def cursor_item(self) -> Any:
        """The row under the cursor, or None when there is none."""
        return self.items[self.cursor_row] if self.items else None

    # -- the cursor --------------------------------------------------------------------------
    def move_cursor(self, row: int, animate: bool = False) -> None:
        """Puts the cursor on row `row` (clamped) and scrolls it into view."""
        if not self.items:
            return
        row = max(0, min(row, len(self.items) - 1))
        moved = row != self.cursor_row
        self.cursor_row = row
        visible = max(self.size.height - 1, 1)
        top = self.scroll_offset.y
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False)
        self.refresh()
        if moved:
            self.post_message(self.CursorMoved(self))

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + max(self.size.height - 2, 1))

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - max(self.size.height - 2, 1))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self.items) - 1)

    def action_choose(self) -> None:
        if self.items:
            self.post_message(self.Chosen(self, self.cursor_row))

    def on_click(self, event: Click) -> None:
        if event.y == 0:
            return
        row = self.scroll_offset.y + event.y - 1
        if 0 <= row < len(self.items):
            chosen = row == self.cursor_row
            self.move_cursor(row)
            if chosen or event.chain > 1:
                self.post_message(self.Chosen(self, row))

    # -- drawing -----------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:
            strip = self._line([Text(title) for title, _ in self.columns],
                               self.get_component_rich_style("line-table--header"))
        else:
            index = scroll_y + y - 1
            if index >= len(self.items):
                return Strip.blank(width, self.rich_style)
            strip = self._row_strip(self.items[index])
            if index == self.cursor_row:
                strip = strip.apply_style(self.get_component_rich_style("line-table--cursor"))
        return strip.crop_extend(scroll_x, scroll_x + width, self.rich_style)

    def _row_strip(self, item: Any) -> Strip:
        key, width = self.key_of(item), self.total_width
        cached = self._strips.get(key)
        if cached is not None and cached[1] == width and cached[0] == item:
            return cached[2]
        strip = self._line(self.cells(item), self.rich_style)
        self._strips[key] = (item, width, strip)
        return strip

    def _line(self, cells: Sequence[Text], base: Style) -> Strip:
        line = Text(no_wrap=True, end="")
        for i, ((_, width), cell) in enumerate(zip(self.columns, cells)):
            if i:
                line.append(" ")
            fitted = cell.copy()
            fitted.overflow = "ellipsis"
            fitted.align(cell.justify if cell.justify in ("center", "right") else "left", width)
            line.append_text(fitted)
        segments = list(line.render(self.app.console))
        return Strip(Segment.apply_style(segments, base), line.cell_len)
