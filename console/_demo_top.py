"""The console as `monarch demo` runs it: `MonarchTop` plus keys that poke the demo workload."""

from __future__ import annotations

import asyncio
import signal
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
        self.signalled = False
        """A SIGTERM came while the app started (`note_signal`): it exits once mounted."""

    def note_signal(self, signum: int, frame: Any) -> None:
        """The process's handler of SIGTERM until the app is mounted."""
        self.signalled = True

    def on_mount(self) -> None:
        # SIGTERM ends the console as `q` does: Textual restores the terminal and stops its
        # threads. SystemExit raised inside the app instead left its input thread running,
        # holding the process forever. (A hangup is `monarch demo`'s own: see cli/_top.py.)
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.exit)
        except (RuntimeError, ValueError):  # not on the main thread: signals are not ours
            return
        if self.signalled:
            self.exit()

    def action_demo(self, what: str) -> None:
        (self.control / what).touch()
        self.notify({"fail": "trainers[3] will fail at the next step",
                     "breakpoint": "inspector[0] will stop at a breakpoint: select it, press a"}
                    [what], title="demo")
