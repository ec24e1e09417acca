"""The `monarch_dbg>` shell: Monarch's debugger commands over any DebugBackend.

Commands (parsed by `_debug_commands`): `help`/`h`; `list`/`l`; `attach`/`a <actor_name> <rank>`
(drive that session's pdb; `detach` or end-of-input returns, `continue` ends the session);
`cast <actor_name> ranks(<spec>) <pdb command>` where spec is `1`, `1,4,6`,
`start:stop:step` or `dim1=1:5:2,dim2=3,dim4=(3,6)`; `continue`/`c` (clear breakpoints and
continue every session); `quit`/`q` (leave, sessions stay paused). Pure logic: the backend
talks to the job.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Protocol, TextIO

from ._debug import format_sessions
from ._debug_commands import (
    Attach, Cast, Continue, DebugCommandError, Help, ListCommand, Quit, parse_command, selects,
)

PROMPT = "monarch_dbg> "

HELP = """\
Monarch debugger commands:
  list | l                          the paused actors (sessions)
  attach | a <actor_name> <rank>    drive one session's pdb (detach: `detach` or Ctrl-D)
  cast <actor_name> ranks(<spec>) <pdb command>
                                    send a pdb command to several sessions; spec is
                                    1 | 1,4,6 | start:stop:step | dim1=1:5:2,dim2=3,dim4=(3,6)
  continue | c                      clear breakpoints and continue every session
  quit | q                          leave the debugger (sessions stay paused)
  help | h                          this text
"""


class DebugBackend(Protocol):
    """How the shell reaches the job's DebugController."""

    def sessions(self) -> list[dict[str, Any]]: ...

    def send(self, session_id: int, line: str) -> bool: ...

    def read(self, session_id: int, offset: int, timeout: float) -> tuple[str, int, bool]: ...

    def continue_all(self) -> int: ...


class ControllerBackend:
    """A backend calling the DebugController actor directly (in a process of the job)."""

    def __init__(self, controller: Any) -> None:
        self._ctrl = controller

    def sessions(self) -> list[dict[str, Any]]:
        return self._ctrl.list.call_one().get(timeout=30)

    def send(self, session_id: int, line: str) -> bool:
        return self._ctrl.send.call_one(session_id, line).get(timeout=30)

    def read(self, session_id: int, offset: int, timeout: float) -> tuple[str, int, bool]:
        return tuple(self._ctrl.read.call_one(session_id, offset, timeout).get(  # type: ignore
            timeout=timeout + 30))

    def continue_all(self) -> int:
        return self._ctrl.continue_all.call_one().get(timeout=30)


CAST_ANSWER_S = 30.0
"""How long `cast` waits for each session's answer (its next pdb prompt)."""


class DebugShell:
    """Reads commands from `stdin`, writes to `stdout`, drives sessions through `backend`."""

    def __init__(self, backend: DebugBackend, stdin: TextIO, stdout: TextIO) -> None:
        self.backend = backend
        self.stdin = stdin
        self.stdout = stdout

    def run(self) -> None:
        """The command loop, until `quit` or end of input."""
        self._write("\n*********************** MONARCH DEBUGGER ***********************\n"
                    "Enter 'help' for a list of commands.\n")
        for line in self._lines(PROMPT):
            if not self.execute(line):
                return

    def execute(self, line: str) -> bool:
        """Runs one command; False means leave the shell."""
        if not line.strip():
            return True
        try:
            command = parse_command(line)
        except DebugCommandError as exc:
            self._write(f"Error parsing input: {exc}\n")
            return True
        if isinstance(command, Quit):
            return False
        if isinstance(command, Help):
            self._write(HELP)
        elif isinstance(command, ListCommand):
            self._write(format_sessions(self.backend.sessions()) + "\n")
        elif isinstance(command, Continue):
            self._write(f"continued {self.backend.continue_all()} session(s)\n")
        elif isinstance(command, Attach):
            self._attach(command.actor_name, command.rank)
        elif isinstance(command, Cast):
            self._cast(command)
        return True

    def _find(self, actor_name: str, rank: int) -> dict[str, Any] | None:
        for info in self.backend.sessions():
            if info["actor_name"] == actor_name and info["rank"] == rank:
                return info
        self._write(f"no paused actor {actor_name} at rank {rank}; 'list' shows them\n")
        return None

    def _attach(self, actor_name: str, rank: int) -> None:
        info = self._find(actor_name, rank)
        if info is None:
            return
        offset, closed = self._pump(info["id"], 0)
        while not closed:
            line = self.stdin.readline()
            if not line or line.strip() == "detach":
                self._write("\ndetached; the session stays paused\n")
                return
            self.backend.send(info["id"], line.rstrip("\n"))
            offset, closed = self._pump(info["id"], offset)
        self._write(f"\nsession {actor_name}[{rank}] ended\n")

    def _pump(self, session_id: int, offset: int) -> tuple[int, bool]:
        """Copies output to stdout until pdb prompts again (or the session ends)."""
        while True:
            text, offset, closed = self.backend.read(session_id, offset, 5.0)
            self._write(text)
            if closed or text.endswith("(Pdb) "):
                return offset, closed

    def _cast(self, cast: Cast) -> None:
        actor_name, command = cast.actor_name, cast.command
        chosen = sorted((i for i in self.backend.sessions() if i["actor_name"] == actor_name
                         and selects(cast.ranks, i["rank"], i.get("coords", {}))),
                        key=lambda i: (str(type(i["rank"])), i["rank"]))
        starts = {}
        for info in chosen:  # what each wrote before the command is not its answer
            _, starts[info["id"]], _ = self.backend.read(info["id"], 0, 0.0)
            self.backend.send(info["id"], command)
        self._write(f"sent {command!r} to {len(chosen)} session(s)\n")
        for info in chosen:  # each rank's answer, as Monarch prints them
            text, closed = self._answer(info["id"], starts[info["id"]])
            self._write(f"--- {actor_name}[{info['rank']}] ---\n{text}")
            if closed:
                self._write(f"(session {actor_name}[{info['rank']}] ended)\n")

    def _answer(self, session_id: int, offset: int) -> tuple[str, bool]:
        """What a session writes after `offset` until pdb prompts again (the prompt left
        out), and whether the session ended."""
        parts = []
        deadline = time.monotonic() + CAST_ANSWER_S
        while True:
            text, offset, closed = self.backend.read(session_id, offset, 5.0)
            parts.append(text)
            joined = "".join(parts)
            if not closed and time.monotonic() > deadline:
                return joined + f"(no prompt after {CAST_ANSWER_S:g} s: still running?)\n", False
            if closed or joined.endswith("(Pdb) "):
                answer = joined.removesuffix("(Pdb) ")
                return answer if not answer or answer.endswith("\n") else answer + "\n", \
                    closed

    def _lines(self, prompt: str) -> Iterable[str]:
        while True:
            self._write(prompt)
            line = self.stdin.readline()
            if not line:
                return
            yield line

    def _write(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()
