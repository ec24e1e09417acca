"""The query pane (`Q`): SQL over the job's telemetry (DataFusion), the result as a table.

The statement runs on a worker thread through the client's `query` (the live job's admin API,
or a finished job's history); whatever the engine refuses is shown with its message, never a
crash. `enter` runs, `esc` closes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

EXAMPLE = "SELECT actor, running_method, running_s, stalled FROM actors ORDER BY running_s DESC"
SHOWN_ROWS = 200
"""Rows drawn at most (the count says how many came back)."""


class QueryPane(ModalScreen[None]):
    """An SQL input over a result table; `run` is the client's query (sql -> pyarrow Table)."""

    BINDINGS = [("escape", "close", "close")]

    def __init__(self, run: Callable[[str], Any], sql: str = EXAMPLE) -> None:
        super().__init__()
        self.run_query = run
        self.sql = sql
        self.result: Any = None
        self.error: str | None = None
        self.runs = 0

    def compose(self) -> ComposeResult:
        with Vertical(id="query-box"):
            yield Input(self.sql, placeholder="SQL: tables actors, actor_status_events, "
                        "messages, spans, logs, metrics, transfers, failures", id="query-sql")
            with VerticalScroll(id="query-result"):
                yield Static(Text("enter runs the statement · esc closes", style="dim"),
                             id="query-body")

    def on_mount(self) -> None:
        self.query_one("#query-box").border_title = "query (DataFusion SQL)"
        self.query_one("#query-sql", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.sql = event.value
        self.query_one("#query-body", Static).update(Text("running…", style="dim"))
        self._run(event.value)

    @work(thread=True, exclusive=True, group="query")
    def _run(self, sql: str) -> None:
        try:
            result, error = self.run_query(sql), None
        except Exception as exc:  # noqa: BLE001 - the engine's message, shown as is
            result, error = None, str(exc) or type(exc).__name__
        self.app.call_from_thread(self._done, result, error)

    def _done(self, result: Any, error: str | None) -> None:
        self.result, self.error = result, error
        self.runs += 1
        if not self.is_attached:  # closed while the query ran: nothing to draw on
            return
        body = Text(error, style="bold red") if error else render(result)
        self.query_one("#query-body", Static).update(body)

    def action_close(self) -> None:
        self.dismiss(None)


def render(table: Any) -> Any:
    """A pyarrow Table as a Rich table (the first `SHOWN_ROWS` rows) with its row count."""
    out = Table(*table.column_names, box=None, header_style="bold", pad_edge=False)
    for row in table.slice(0, SHOWN_ROWS).to_pylist():
        out.add_row(*(Text("NULL" if v is None else str(v), no_wrap=True) for v in row.values()))
    caption = f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}"
    out.caption = caption + (f" (first {SHOWN_ROWS} shown)" if table.num_rows > SHOWN_ROWS
                             else "")
    return out
