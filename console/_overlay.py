"""An overlay that shows the result of a slow action (a py-spy stack, diagnostics), rerun with
`r`, closed with `esc`/`q`; the work runs on a thread so the screen stays live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class Overlay(ModalScreen[None]):
    """Runs `fetch()` on a worker thread and shows `render(result)` (or the error)."""

    BINDINGS = [("escape,q", "close", "close"), ("r", "rerun", "rerun"),
                ("j,down", "scroll(1)", "down"), ("k,up", "scroll(-1)", "up")]
    KEYS_HINT = "r rerun · esc close"
    """The box's subtitle."""

    def __init__(self, title: str, fetch: Callable[[], Any],
                 render: Callable[[Any], RenderableType]) -> None:
        super().__init__()
        self.title_text = title
        self.fetch = fetch
        self.render_result = render
        self.result: Any = None
        self.error: str | None = None
        self.runs = 0

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="overlay-box"):
            yield Static(Text("running…", style="dim"), id="overlay-body")

    def on_mount(self) -> None:
        self.query_one("#overlay-box").border_title = self.title_text
        self.query_one("#overlay-box").border_subtitle = self.KEYS_HINT
        self.action_rerun()

    def action_rerun(self) -> None:
        self.query_one("#overlay-body", Static).update(Text("running…", style="dim"))
        self._run()

    @work(thread=True, exclusive=True, group="overlay")
    def _run(self) -> None:
        try:
            result, error = self.fetch(), None
        except Exception as exc:  # noqa: BLE001 - shown in the overlay
            result, error = None, f"{type(exc).__name__}: {exc}"
        self.app.call_from_thread(self._done, result, error)

    def _done(self, result: Any, error: str | None) -> None:
        self.result, self.error = result, error
        self.runs += 1
        if not self.is_attached:  # closed while it ran: nothing to draw on
            return
        body = Text(error, style="bold red") if error else self.render_result(result)
        self.query_one("#overlay-body", Static).update(body)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_scroll(self, lines: int) -> None:
        self.query_one("#overlay-box", VerticalScroll).scroll_relative(y=lines, animate=False)
