"""The log pane: the job's merged logs, filtered, folded across ranks, following the newest."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

from ._model import LogLine


class LogPane(RichLog):
    """Re-renders the model's log lines when they changed (the model folds and filters)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(max_lines=2000, wrap=False, markup=False, highlight=False,
                         auto_scroll=True, **kwargs)  # type: ignore[arg-type]
        self.shown_lines: list[LogLine] = []
        self.follow = True

    def on_mount(self) -> None:
        self.border_title = "logs"

    def show(self, lines: list[LogLine], status: str) -> None:
        """Shows `lines` (oldest first) under a title saying what is filtered."""
        self.border_title = f"logs {status}".strip()
        if lines == self.shown_lines:
            return
        same_prefix = (len(lines) >= len(self.shown_lines) and self.shown_lines
                       and lines[:len(self.shown_lines)] == self.shown_lines)
        fresh = lines[len(self.shown_lines):] if same_prefix else lines
        if not same_prefix:
            self.clear()
        self.auto_scroll = self.follow
        for line in fresh:
            self.write(render_line(line), scroll_end=self.follow)
        self.shown_lines = list(lines)


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
