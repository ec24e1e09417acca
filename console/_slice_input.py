"""The slice input: ranks of the selected mesh, as `hosts=0, gpus=0:4`."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import Input


class SliceInput(Input):
    """`hosts=0, gpus=0:4`: selects ranks of the selected mesh (enter applies, esc cancels)."""

    class Applied(Message):
        """The user pressed enter (the app validates against the mesh's extent)."""

        def __init__(self, text: str) -> None:
            self.text = text
            super().__init__()

    class Cancelled(Message):
        """The user pressed escape."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(placeholder="slice, e.g. hosts=0, gpus=0:4 (blank: whole mesh)",
                         **kwargs)  # type: ignore[arg-type]

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Applied(event.value))

    async def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.post_message(self.Cancelled())
