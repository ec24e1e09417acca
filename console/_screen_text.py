"""The console's screen as plain text (`ctrl+s` and `:save` write it to a file; tests read
it): one line per terminal row, no styles."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console


def screen_text(app: Any) -> str:
    """What the terminal shows now, overlays included."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False,
                      safe_box=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False)
