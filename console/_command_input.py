"""The `:` input: a command (`meshes`, `slice gpus=0:2`, ...) or a slice (`gpus=0:2`), with the
commands completed as they are typed (→ accepts)."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import Input

from ._command import ALIASES, COMMANDS


class CommandInput(Input):
    """Enter runs what was typed (the app parses and checks it), esc cancels."""

    class Applied(Message):
        """The user pressed enter."""

        def __init__(self, text: str) -> None:
            self.text = text
            super().__init__()

    class Cancelled(Message):
        """The user pressed escape."""

    def __init__(self, **kwargs: object) -> None:
        words = [*COMMANDS, *ALIASES]
        super().__init__(placeholder="meshes, procs, actors, services, jobs, grid, sql... "
                                     "or a slice: gpus=0:4 (→ completes, esc cancels)",
                         suggester=SuggestFromList(words, case_sensitive=False),
                         **kwargs)  # type: ignore[arg-type]

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Applied(event.value))

    async def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.post_message(self.Cancelled())
