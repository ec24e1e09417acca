"""The detail pane: everything known about the selected row, failures first."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ._describe import TABLE_SHOWN, Description
from ._styles import state_style


class DetailPane(VerticalScroll):
    """Shows a `Description` (fields, a table, the root cause and report of a failure)."""

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static(id="detail-body")

    description: Description | None = None
    """What the pane shows now."""

    def on_mount(self) -> None:
        self.border_title = "detail"

    def show(self, description: Description) -> None:
        """Replaces the content (not re-rendered when nothing in it changed)."""
        if description == self.description:
            return
        self.description = description
        self.border_title = f"detail: {description.title}"
        self.query_one("#detail-body", Static).update(render(description))


def render(d: Description) -> RenderableType:
    """The Rich renderable of a description."""
    parts: list[RenderableType] = []
    if d.failure:
        parts.append(Text.assemble(("root cause: ", "bold red"), (d.failure, "red")))
    fields = Table.grid(padding=(0, 1))
    fields.add_column(style="bold cyan", no_wrap=True)
    fields.add_column()
    for key, value in d.fields:
        style = state_style(value) if key in ("state", "health") else ""
        fields.add_row(key, Text(value, style=style))
    parts.append(fields)
    if d.report:  # before the table: the flight recorder must not push it out of sight
        parts.append(Text(""))
        parts.append(Text("failure report", style="bold red"))
        parts.append(Text(d.report, style="red"))
    if d.table is not None:
        headers, rows = d.table
        table = Table(*headers, box=None, header_style="bold", pad_edge=False, expand=False)
        for row in rows[:TABLE_SHOWN]:
            table.add_row(*(Text(cell, style=state_style(cell)) for cell in row))
        parts.append(Text(""))
        parts.append(table)
        if len(rows) > TABLE_SHOWN:
            rest = f"… {len(rows) - TABLE_SHOWN} more"
            parts.append(Text(f"{rest} (all of them: {d.whole})" if d.whole else rest,
                              style="dim"))
    return Group(*parts)
