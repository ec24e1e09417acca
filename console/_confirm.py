"""A yes/no question before a destructive action (kill, stop)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True on `y`, False on `n`/`esc`/anything else."""

    BINDINGS = [("y", "answer(True)", "yes"), ("n,escape,q", "answer(False)", "no")]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            if self.detail:
                yield Static(self.detail, id="confirm-detail")
            yield Static("[b]y[/b] yes   [b]n[/b]/[b]esc[/b] no", id="confirm-keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
