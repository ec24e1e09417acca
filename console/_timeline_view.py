"""The span timeline (`t`, `:timeline`): the selected mesh's (or actor's) last seconds as bars,
one lane per rank, coloured by span name; a handler still running reaches `now` and says so
(`▶ train_steps`), so a rank stuck while the others wait stands out. `+`/`-` zoom out and in,
`r` fetches again, esc goes back. Spans come from the admin API on a worker thread, once a
second; `monarch trace export` stays the tool for Perfetto."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from . import _model as model
from . import _timeline as timeline
from ._command_input import CommandInput

PALETTE = ("#5fafff", "#87d700", "#ffaf00", "#d787ff", "#5fd7d7", "#ff8787", "#afaf5f",
           "#8787ff")
"""Span names' colours, in the order of the time they took."""
FETCH_S = 1.0
SPANS = 5000
"""Spans asked for per fetch (the newest)."""


class TimelineScreen(Screen[None]):
    """The timeline of `mesh_id` (all ranks, or only `rank`)."""

    BINDINGS = [Binding("escape", "back", "back"),
                Binding("plus,equals_sign", "zoom(1)", "zoom out"),
                Binding("minus", "zoom(-1)", "zoom in"),
                Binding("r", "fetch", "fetch again"),
                Binding("q", "app.quit", "quit", show=False)]

    def __init__(self, mesh_id: str, rank: int | None = None, window_s: float = 10.0) -> None:
        super().__init__()
        self.mesh_id, self.rank, self.window_s = mesh_id, rank, window_s
        self.spans: list[dict[str, Any]] = []
        self.error: str | None = None
        self.fetches = 0
        self.shown: timeline.Timeline | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-head")
        with VerticalScroll(id="timeline-box"):
            yield Static(id="timeline-body")
        yield CommandInput(id="timeline-command")  # `:` here as on the tree
        yield Footer()

    def on_mount(self) -> None:
        self.action_fetch()
        self.set_interval(FETCH_S, self.action_fetch)

    def action_fetch(self) -> None:
        mesh = model.Index(self.app.snapshot).meshes.get(self.mesh_id)  # type: ignore
        if mesh is not None:  # by name: a live job's API and a history both take it
            self._fetch(getattr(self.app, "client", None), mesh["name"])

    @work(thread=True, exclusive=True, group="timeline")
    def _fetch(self, client: Any, mesh_name: str) -> None:
        try:
            spans, error = client.spans(mesh=mesh_name, limit=SPANS), None
        except Exception as exc:  # noqa: BLE001 - shown in the view
            spans, error = [], f"{type(exc).__name__}: {exc}"
        self.app.call_from_thread(self._fetched, spans, error)

    def _fetched(self, spans: list[dict[str, Any]], error: str | None) -> None:
        self.spans, self.error = spans, error
        self.fetches += 1
        if self.is_attached:  # closed while the spans came: nothing to draw on
            self.show()

    def show(self) -> None:
        """Redraws from the spans fetched and the app's newest snapshot."""
        if not self.query("#timeline-head"):
            return  # not composed yet, or its widgets already gone (closed as spans came)
        mesh = model.Index(self.app.snapshot).meshes.get(self.mesh_id)  # type: ignore
        head = self.query_one("#timeline-head", Static)
        body = self.query_one("#timeline-body", Static)
        if mesh is None:
            head.update(Text(f"timeline: mesh {self.mesh_id} is not in the job any more",
                             style="red"))
            return
        actors = [a for a in mesh.get("actors", []) if self.rank in (None, a["rank"])]
        labels = {a["rank"]: f"{mesh['name']}[{a['rank']}]" for a in actors}
        running = {a["rank"]: (a["running"][0]["method"], a["running"][0]["since"])
                   for a in actors if a.get("running")}
        suffix = max((len(f" ▶ {method}") for method, _ in running.values()), default=0)
        width = max(self.size.width - max((len(v) for v in labels.values()), default=8)
                    - suffix - 6, 10)  # the label's space, the box's padding, the scrollbar
        shown = timeline.build(self.spans, [a["rank"] for a in actors], self.now_ns(),
                               self.window_s, width, labels, running)
        self.shown = shown
        colours = {name: PALETTE[i % len(PALETTE)] for i, (name, _) in enumerate(shown.names)}
        where = f"{mesh['name']}[{self.rank}]" if self.rank is not None else mesh["name"]
        head.update(Text.assemble(("timeline ", "bold"), (where, "bold"),
                                  f" · last {self.window_s:g} s · {len(shown.lanes)} "
                                  f"lane(s) · {len(self.spans)} spans fetched",
                                  (f" · {self.error}" if self.error else "", "red")))
        body.update(render(shown, colours, self.window_s))

    def now_ns(self) -> int:
        """The right edge: now in a running job; in one that ended (a history), its newest
        span's end."""
        if not self.app.has_ended():  # type: ignore[attr-defined]
            return time.time_ns()
        return max((int(s.get("end_ns") or 0) for s in self.spans), default=time.time_ns())

    def action_zoom(self, step: int) -> None:
        windows = timeline.WINDOWS_S
        at = min(range(len(windows)), key=lambda i: abs(windows[i] - self.window_s))
        self.window_s = windows[min(max(at + step, 0), len(windows) - 1)]
        self.show()

    def action_back(self) -> None:
        self.app.pop_screen()


def render(shown: timeline.Timeline, colours: dict[str, str], window_s: float) -> Text:
    """The lanes, the axis under them and the legend."""
    label_w = max((len(lane.label) for lane in shown.lanes), default=6)
    out = Text(no_wrap=True)
    for lane in shown.lanes:
        out.append(f"{lane.label:>{label_w}} ", style="bold")
        for cell in lane.cells:
            out.append("█" if cell else "·", style=colours.get(cell or "", "") or "dim")
        out.append(f" ▶ {lane.running}" if lane.running else "",
                   style=colours.get(lane.running, ""))
        out.append("\n")
    width = len(shown.lanes[0].cells) if shown.lanes else 10
    out.append(" " * (label_w + 1) + timeline.axis(width, window_s) + "\n\n", style="dim")
    for name, seconds in shown.names:
        out.append("█ ", style=colours[name])
        out.append(f"{name} {seconds:.1f} s   ")
    if not shown.names:
        out.append("no span in the window", style="dim")
    return out
