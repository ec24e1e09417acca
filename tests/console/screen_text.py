"""The current screen of a running Textual app as plain text (for tests and for looking)."""

from __future__ import annotations

import io

from rich.console import Console


def screen_text(app) -> str:  # type: ignore[no-untyped-def]
    """The screen's characters, one line per terminal row, no styles."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False,
                      safe_box=False)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False)
