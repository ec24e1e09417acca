"""The console as `monarch demo` runs it: `MonarchTop` plus keys that poke the demo workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.binding import Binding

from .app import MonarchTop


class DemoTop(MonarchTop):
    """`F` makes trainers[3] fail, `B` stops inspector[0] at a breakpoint (then press `a`)."""

    BINDINGS = [Binding("F", "demo('fail')", "fail a rank"),
                Binding("B", "demo('breakpoint')", "breakpoint")]

    def __init__(self, client: Any, control: Path, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.control = control

    def action_demo(self, what: str) -> None:
        (self.control / what).touch()
        self.notify({"fail": "trainers[3] will fail at the next step",
                     "breakpoint": "inspector[0] will stop at a breakpoint: select it, press a"}
                    [what], title="demo")
