"""The py-spy overlay: the stacks of every thread of the selected proc."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from ._overlay import Overlay


class StackOverlay(Overlay):
    """`p`: a py-spy dump of one proc."""

    def __init__(self, proc: str, pid: object, fetch: Callable[[], str]) -> None:
        super().__init__(f"py-spy dump: {proc} (pid {pid})", fetch, render_stack)
        self.proc = proc


def render_stack(dump: str) -> Text:
    """Thread headers bold, our frames highlighted, idle frames dim."""
    text = Text()
    for line in str(dump).splitlines():
        if line.startswith("Thread"):
            text.append(line + "\n", style="bold cyan")
        elif line.startswith(("Process", "Python")):
            text.append(line + "\n", style="bold")
        elif "(idle)" in line or "threading.py" in line or "selectors.py" in line:
            text.append(line + "\n", style="dim")
        else:
            text.append(line + "\n")
    return text
