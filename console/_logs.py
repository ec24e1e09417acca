"""The log pane: the job's merged logs, filtered, folded across ranks, following the newest.

It draws only the lines that fit (a follow view of thousands of lines costs what its height
costs), so 64 actors streaming cannot slow the screen down: the model folds and filters, the
pane picks the visible window.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widget import Widget

from ._logmodel import LogLine


class LogPane(Widget, can_focus=True):
    """The newest lines (following), or a window scrolled back with ↑/↓/PgUp/PgDn/Home/End."""

    BINDINGS = [Binding("up", "scroll_lines(-1)", "up", show=False),
                Binding("down", "scroll_lines(1)", "down", show=False),
                Binding("pageup", "scroll_lines(-20)", "page up", show=False),
                Binding("pagedown", "scroll_lines(20)", "page down", show=False),
                Binding("home", "scroll_home", "oldest", show=False),
                Binding("end", "scroll_end", "newest", show=False)]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.shown_lines: list[LogLine] = []
        self.follow = True
        self.top = 0
        """Index of the first visible line while not following."""

    def on_mount(self) -> None:
        self.border_title = "logs"

    def show(self, lines: list[LogLine], status: str) -> None:
        """Shows `lines` (oldest first) under a title saying what is filtered."""
        self.border_title = f"logs {status}".strip()
        if lines != self.shown_lines:
            self.shown_lines = list(lines)
            self.refresh()

    def render(self) -> Text:
        height = max(self.content_size.height, 1)
        if self.follow:
            visible = self.shown_lines[-height:]
        else:
            self.top = max(min(self.top, len(self.shown_lines) - height), 0)
            visible = self.shown_lines[self.top:self.top + height]
        text = Text("\n").join(render_line(line) for line in visible)
        text.no_wrap = True
        text.overflow = "ellipsis"
        return text

    def action_scroll_lines(self, delta: int) -> None:
        bottom = self._bottom()
        start = bottom if self.follow else self.top
        self.top = min(max(start + delta, 0), bottom)
        self.follow = delta > 0 and self.top >= bottom  # back at the newest line: follow again
        self.refresh()

    def set_follow(self, follow: bool) -> None:
        """Follows the newest lines, or freezes the view where it is."""
        if not follow and self.follow:
            self.top = self._bottom()
        self.follow = follow
        self.refresh()

    def _bottom(self) -> int:
        return max(len(self.shown_lines) - max(self.content_size.height, 1), 0)

    def action_scroll_home(self) -> None:
        self.follow, self.top = False, 0
        self.refresh()

    def action_scroll_end(self) -> None:
        self.follow = True
        self.refresh()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_scroll_lines(-3)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_scroll_lines(3)


def render_line(line: LogLine) -> Text:
    """`12:00:01 [trainers[0-3]] text`, stderr in red, folded counts in yellow."""
    text = Text(time.strftime("%H:%M:%S ", time.localtime(line.time)), style="dim")
    if line.count > 1:
        text.append(f"[{line.count} similar log lines] ", style="yellow")
    if line.source:
        text.append(f"[{line.source}] ", style="cyan")
    style = "red" if line.stream == "stderr" or line.level >= 40 else ""
    text.append(line.text, style=style)
    return text
