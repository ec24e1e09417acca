"""The log search input (`/`)."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import Input


class SearchInput(Input):
    """`/` text search of the logs (live while typing; enter keeps it, esc clears it)."""

    class Searched(Message):
        """The search text changed."""

        def __init__(self, text: str, done: bool) -> None:
            self.text = text
            self.done = done
            super().__init__()

    def __init__(self, **kwargs: object) -> None:
        super().__init__(placeholder="search logs", **kwargs)  # type: ignore[arg-type]

    async def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Searched(event.value, False))

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Searched(event.value, True))

    async def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.value = ""
            self.post_message(self.Searched("", True))
