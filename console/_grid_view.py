"""The grid view (`v`): an actor mesh as its shape, one cell per rank, coloured by a measure.

The last dimension runs across, every point of the others down (`hosts × gpus`, `dp × tp`); a
one-dimensional mesh wraps to the screen's width. `m` changes the measure (state, queue depth,
time in the running handler, messages/s, a metric of the job such as `step`), `M` the metric.
Lagging ranks (a metric behind the mesh's maximum) carry `‹`, stalled ones `!`. Space marks the
cell under the cursor, `:` marks a slice; kill, stop, break, attach, py-spy and stacks act on
the marked cells (or the cursor's), through the app's own actions.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input, Static

from . import _grid as grid
from . import _keys as keys
from . import _model as model
from ._styles import STATE_GLYPHS, state_style

CELL_W = 2
"""Characters per cell: the glyph and its mark (`‹` lagging, `!` stalled)."""
SHADES = "·░▒▓█"
"""A numeric measure's value, from none to the mesh's maximum."""
HEAT = ("green", "#87d700", "#ffaf00", "red")
METRIC_EVERY_S = 1.0
"""How often the metric measure asks the admin API for the job's metrics."""


class GridCells(Widget, can_focus=True):
    """The cells; the screen moves the cursor and keeps the marks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.grid: grid.Grid | None = None
        self.cursor = (0, 0)
        self.marked: set[int] = set()

    def render(self) -> Text:
        if self.grid is None:
            return Text("this mesh is gone", style="dim")
        label_w = min(max((len(label) for label, _ in self.grid.rows), default=0), 28)
        out = Text(no_wrap=True)
        for r, (label, cells) in enumerate(self.grid.rows):
            out.append(f"{label[:label_w]:>{label_w}} ", style="dim")
            for c, cell in enumerate(cells):
                out.append_text(self._cell(cell, (r, c) == self.cursor))
            out.append("\n")
        return out

    def _cell(self, cell: grid.Cell | None, under_cursor: bool) -> Text:
        if cell is None:
            return Text(" " * CELL_W)
        glyph, style = glyph_of(cell, self.grid)  # type: ignore[arg-type]
        mark = "!" if cell.stalled else "‹" if cell.lagging else " "
        mark_style = "bold #ffaf00" if cell.stalled else "bold red"
        if cell.rank in self.marked:
            style, mark_style = f"{style} on #264f78", f"{mark_style} on #264f78"
        if under_cursor:
            style, mark_style = f"{style} reverse", f"{mark_style} reverse"
        return Text.assemble((glyph, style), (mark, mark_style))


def glyph_of(cell: grid.Cell, shown: grid.Grid) -> tuple[str, str]:
    """A cell's glyph and style: its state's for the state measure (and for a failed, stopped
    or paused rank whatever the measure), else a shade of its value against the maximum."""
    if shown.measure == "state" or cell.state in (model.FAILED, model.STOPPED, model.PAUSED):
        return STATE_GLYPHS.get(cell.state, "?"), state_style(cell.state) or "white"
    if cell.value is None:
        return "?", "dim"
    fraction = cell.value / shown.top if shown.top else 0.0
    shade = SHADES[min(int(fraction * (len(SHADES) - 1) + 0.5), len(SHADES) - 1)]
    if shown.measure == "metric":  # progress: behind is what matters
        return shade, "bold red" if cell.lagging else "cyan"
    return shade, HEAT[min(int(fraction * len(HEAT)), len(HEAT) - 1)]


class GridScreen(Screen[None]):
    """The grid of the actor mesh `mesh_id`; redrawn by the app on each snapshot (`show`)."""

    BINDINGS = [Binding(k.keys, k.action, k.footer or k.description, show=bool(k.footer))
                for k in keys.GRID_KEYS if k.action]
    BINDINGS += [Binding("up", "move(-1, 0)", show=False),
                 Binding("j,down", "move(1, 0)", show=False),
                 Binding("left", "move(0, -1)", show=False),
                 Binding("right", "move(0, 1)", show=False),
                 Binding("q", "app.quit", "quit", show=False)]

    def __init__(self, mesh_id: str, measure: str = "state") -> None:
        super().__init__()
        self.mesh_id = mesh_id
        self.measure = measure
        self.metric: str | None = None
        self.metric_names: list[str] = []
        self.metric_values: dict[int, float] = {}
        self._metric_asked = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="grid-head")
        yield GridCells(id="grid-cells")
        yield Static(id="grid-cell")
        yield Input(placeholder="slice, e.g. hosts=0:2, gpus=3 (enter marks it, esc cancels)",
                    id="grid-slice")
        yield Footer()

    @property
    def cells(self) -> GridCells:
        return self.query_one(GridCells)

    def on_mount(self) -> None:
        self.cells.focus()
        self.show()

    def on_resize(self, event: events.Resize) -> None:
        self.show()

    # -- drawing ---------------------------------------------------------------------------
    def show(self) -> None:
        """Rebuilds the grid from the app's newest snapshot and rates."""
        if not self.query("#grid-head"):
            return  # not composed yet, or its widgets already gone (being closed)
        app: Any = self.app
        width = max((self.size.width - 32) // CELL_W, 4)
        shown = grid.build(app.snapshot, self.mesh_id, self.measure, width, app.rates.rates,
                           self.metric_values)
        cells = self.cells
        cells.grid = shown
        if shown is not None:
            rows = len(shown.rows)
            r = min(cells.cursor[0], rows - 1) if rows else 0
            c = min(cells.cursor[1], len(shown.rows[r][1]) - 1) if rows else 0
            cells.cursor = (max(r, 0), max(c, 0))
        cells.refresh(layout=True)
        self.query_one("#grid-head", Static).update(self.headline(shown))
        self.query_one("#grid-cell", Static).update(self.cell_line(self.under_cursor()))
        if self.measure == "metric":
            self._ask_metrics()

    def headline(self, shown: grid.Grid | None) -> Text:
        """`trainers {hosts: 4, gpus: 8} · measure queue (max 12 msgs) · 2 lagging · ...`"""
        if shown is None:
            return Text(f"grid: mesh {self.mesh_id} is not in the job any more", style="red")
        extent = "{" + ", ".join(f"{a}: {b}" for a, b in zip(shown.labels, shown.sizes)) + "}"
        measure = self.measure if self.measure != "metric" else f"metric {self.metric or '?'}"
        if shown.top is not None:
            measure += f" (max {shown.top:g} {grid.UNITS[self.measure]})".replace(" )", ")")
        cells = shown.cells
        counts = [f"{len(cells)} ranks"]
        for word, n in (("lagging ‹", sum(c.lagging for c in cells)),
                        ("stalled !", sum(c.stalled for c in cells)),
                        ("failed", sum(c.state == model.FAILED for c in cells)),
                        ("paused", sum(c.state == model.PAUSED for c in cells)),
                        ("marked", len(self.cells.marked))):
            if n:
                counts.append(f"{n} {word}")
        return Text.assemble(("grid ", "bold"), (shown.name, "bold"), f" {extent} · ",
                             (measure, "cyan"), " · " + " · ".join(counts))

    def cell_line(self, cell: grid.Cell | None) -> Text:
        """The cursor's rank: point, state, value, process, what it runs."""
        if cell is None:
            return Text("")
        point = ", ".join(f"{k}={v}" for k, v in cell.point.items())
        value = "" if self.measure == "state" or cell.value is None else \
            f" · {self.measure} {cell.value:g}"
        running = f" · in {cell.running}" if cell.running else ""
        return Text.assemble((f"rank {cell.rank}", "bold"), f" ({point}) · ",
                             (cell.state, state_style(cell.state)),
                             f"{value}{running} · {cell.proc} pid {cell.pid}")

    def under_cursor(self) -> grid.Cell | None:
        shown = self.cells.grid
        return shown.at(*self.cells.cursor) if shown else None

    # -- moving and marking ----------------------------------------------------------------
    def action_move(self, rows: int, cols: int) -> None:
        shown = self.cells.grid
        if shown is None or not shown.rows:
            return
        r = min(max(self.cells.cursor[0] + rows, 0), len(shown.rows) - 1)
        c = min(max(self.cells.cursor[1] + cols, 0), len(shown.rows[r][1]) - 1)
        while c > 0 and shown.at(r, c) is None:  # padding of a short last row
            c -= 1
        self.cells.cursor = (r, c)
        self.show()

    def action_mark(self) -> None:
        cell = self.under_cursor()
        if cell is not None:
            self.cells.marked ^= {cell.rank}
            self.show()

    def action_unmark(self) -> None:
        self.cells.marked = set()
        self.show()

    def action_slice(self) -> None:
        box = self.query_one("#grid-slice", Input)
        box.add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.mark_slice(event.value):
            self._close_slice()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.query_one("#grid-slice", Input).has_focus:
            event.stop()
            self._close_slice()

    def _close_slice(self) -> None:
        self.query_one("#grid-slice", Input).remove_class("shown")
        self.cells.focus()

    def mark_slice(self, text: str) -> bool:
        """Marks the ranks `text` selects (`hosts=0:2, gpus=3`); False (and why) if it does
        not fit the mesh."""
        shown = self.cells.grid
        if shown is None:
            return False
        try:
            ranks = model.select_ranks(text, shown.labels, shown.sizes)
        except model.SliceError as exc:
            self.notify(str(exc), title="slice", severity="error")
            return False
        self.cells.marked = set(ranks)
        self.show()
        return True

    def action_measure(self) -> None:
        self.measure = grid.MEASURES[(grid.MEASURES.index(self.measure) + 1)
                                     % len(grid.MEASURES)]
        self.show()

    def action_metric(self) -> None:
        """The next metric of the job (the measure becomes `metric`)."""
        names = self.metric_names
        if names:
            self.metric = names[(names.index(self.metric) + 1) % len(names)] \
                if self.metric in names else names[0]
        self.measure = "metric"
        self.metric_values = {}
        self._metric_asked = 0.0
        self.show()

    # -- the metric measure ----------------------------------------------------------------
    def _ask_metrics(self) -> None:
        import time

        now = time.monotonic()
        fetch = getattr(self.app, "client", None)
        if now - self._metric_asked < METRIC_EVERY_S or not hasattr(fetch, "metrics"):
            return
        self._metric_asked = now
        self._fetch_metrics(fetch)

    @work(thread=True, exclusive=True, group="grid-metrics")
    def _fetch_metrics(self, client: Any) -> None:
        try:
            points = client.metrics(by_process=True)
        except Exception as exc:  # noqa: BLE001 - said in the headline's place
            self.app.call_from_thread(self.notify, f"metrics: {exc}", severity="error")
            return
        self.app.call_from_thread(self._metrics_came, points)

    def _metrics_came(self, points: list[dict[str, Any]]) -> None:
        mesh = model.Index(self.app.snapshot).meshes.get(self.mesh_id)  # type: ignore
        self.metric_names = grid.metric_names(points, mesh) if mesh else []
        if self.metric not in self.metric_names:
            self.metric = self.metric_names[0] if self.metric_names else None
        self.metric_values = grid.metric_by_rank(points, self.metric, mesh) \
            if self.metric and mesh else {}
        if self.measure == "metric" and self.is_attached:  # not closed while they came
            self.show()

    # -- acting on the marked cells --------------------------------------------------------
    def target(self) -> model.Target | None:
        """The marked cells (or the cursor's) as the app's action target."""
        shown = self.cells.grid
        cell = self.under_cursor()
        if shown is None or cell is None:
            return None
        ranks = sorted(self.cells.marked) or [cell.rank]
        snapshot = self.app.snapshot  # type: ignore[attr-defined]
        index = model.Index(snapshot)
        mesh = index.meshes[self.mesh_id]
        selection = grid.selection_of(ranks, shown.labels, shown.sizes)
        if len(ranks) == 1 and shown.labels != ("rank",):
            selection = model.point_selection(index.actors[model.actor_key(
                self.mesh_id, ranks[0])][1].get("point"))
        return model.mesh_target(index, mesh, ranks, selection)

    def action_act(self, name: str) -> None:
        target = self.target()
        if target is None:
            self.notify("no rank under the cursor", severity="warning")
            return
        self.app.act(name, target)  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()
