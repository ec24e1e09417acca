"""Transfer throughput: total bytes/s with a sparkline, then per mesh and per link."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from ._format import fmt_bytes, sparkline


class ThroughputPane(Vertical):
    """Shows the admin API's `transfers()` summary (bytes/s over a window, with history)."""

    def compose(self) -> ComposeResult:
        yield Static(id="throughput-total")
        yield Sparkline([0.0], id="throughput-spark")
        yield Static(id="throughput-table")

    def on_mount(self) -> None:
        self.border_title = "transfers"

    def show(self, transfers: dict[str, Any] | None) -> None:
        """Replaces the content (None: nothing known yet)."""
        transfers = transfers or {}
        total = transfers.get("total") or {}
        window = transfers.get("window", 10.0)
        rate = total.get("bytes_per_s") or 0.0
        self.query_one("#throughput-total", Static).update(Text.assemble(
            ("total ", "bold"), (f"{fmt_bytes(rate)}/s", "bold green"),
            (f"  {total.get('count', 0)} transfers, {fmt_bytes(total.get('bytes', 0))} "
             f"in {window:g}s", "dim")))
        history = list(total.get("history") or [])
        spark = self.query_one("#throughput-spark", Sparkline)
        spark.display = any(v > 0 for v in history)  # all zero: drawn as full bars
        spark.data = history or [0.0]
        self.query_one("#throughput-table", Static).update(_table(transfers))


def _table(transfers: dict[str, Any]) -> Table:
    table = Table("mesh / link", "bytes/s", "history", box=None, header_style="bold",
                  pad_edge=False)
    for mesh in transfers.get("meshes", []):
        table.add_row(Text(mesh.get("mesh") or "(no mesh)", style="cyan"),
                      f"{fmt_bytes(mesh.get('bytes_per_s'))}/s",
                      Text(sparkline(mesh.get("history") or [], 20), style="green"))
    for link in transfers.get("links", []):
        table.add_row(f"{link.get('src')} → {link.get('dst')}",
                      f"{fmt_bytes(link.get('bytes_per_s'))}/s",
                      Text(sparkline(link.get("history") or [], 20), style="blue"))
    return table
