"""Recent spans: calls and actor invocations with their durations, newest first."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from ._format import fmt_ms
from ._table import LineTable

COLUMNS = ("duration", "span", "where", "outcome", "time")
WIDTHS = (8, 26, 16, 7, 8)
"""Fixed widths."""


class SpanPane(LineTable):
    """The newest spans (the admin API's `spans()`), slow ones highlighted. Virtual
    (`LineTable`): a span already drawn is not drawn again when newer ones push it down."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(list(zip(COLUMNS, WIDTHS)), **kwargs)
        self.shown: list[tuple[str, ...]] = []

    def on_mount(self) -> None:
        self.border_title = "spans"

    @property
    def row_count(self) -> int:
        return len(self.items)

    def cells(self, item: tuple[Text, ...]) -> tuple[Text, ...]:
        return item

    def key_of(self, item: tuple[Text, ...]) -> tuple[str, ...]:
        return tuple(cell.plain for cell in item)

    def show(self, spans: Sequence[dict[str, Any]], limit: int = 100) -> None:
        """Shows the newest `limit` spans."""
        ordered = sorted(spans, key=lambda s: s.get("end_ns") or s.get("start_ns") or 0,
                         reverse=True)[:limit]
        rows = [_cells(s) for s in ordered]
        plain = [tuple(c.plain for c in row) for row in rows]
        if plain == self.shown:
            return
        self.shown = plain
        self.border_title = f"spans ({len(spans)} recent)"
        self.set_rows(rows)


def _cells(span: dict[str, Any]) -> tuple[Text, ...]:
    start = (span.get("start_ns") or 0) / 1e9
    where = ""
    if span.get("mesh") is not None:
        rank = span.get("rank")
        where = f"{span['mesh']}[{rank}]" if rank is not None else str(span["mesh"])
    duration = span.get("duration_ms")
    outcome = str(span.get("outcome") or "")
    slow = duration is not None and duration >= 100
    return (Text(fmt_ms(duration), justify="right", style="yellow" if slow else ""),
            Text(str(span.get("name", "?"))), Text(where, style="cyan"),
            Text(outcome, style="red" if outcome not in ("", "ok") else "green"),
            Text(time.strftime("%H:%M:%S", time.localtime(start)), style="dim"))
