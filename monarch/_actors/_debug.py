"""The debugger: `breakpoint()` in an endpoint pauses that actor and opens a real pdb session.

The session registers with the job's `DebugController` (a singleton actor in the controller);
pdb's output goes to the controller, which keeps it per session, and its input comes back on a
Port. A person drives sessions from `monarch debug` or the console (through the admin API), or
from code through the controller's endpoints. An actor can also be asked to break at its next
message (`request_break`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import pdb
import socket
import sys
from typing import Any, List

from ._actor import Actor
from ._channel import Channel
from .._runtime._context import context
from ._endpoint import endpoint

CONTROLLER_NAME = "debug_controller"
ENDED_WAIT_S = 10.0
"""How long an actor leaving pdb waits for the controller to know (then goes on anyway)."""

_open: tuple[dict[str, Any], ...] = ()
"""The open sessions of this process's DebugController (the job's controller), as `list`
answers them: replaced whole when one opens or ends, so the admin API reads it from its own
threads without a message (`monarch top` asks twice a second; each `list` call cost the
controller ~3 ms at 1,024 actors and put a span of its own in the job's telemetry)."""


def open_sessions() -> list[dict[str, Any]]:
    """The open debug sessions of the job this process controls (none if no actor ever
    paused: the DebugController is not spawned for that)."""
    return [dict(info) for info in _open]


@dataclasses.dataclass
class _Session:
    info: dict[str, Any]
    port: Any
    chunks: list[str] = dataclasses.field(default_factory=list)
    size: int = 0
    closed: bool = False
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def append(self, text: str) -> None:
        self.chunks.append(text)
        self.size += len(text)
        self.changed.set()

    def text_since(self, offset: int) -> str:
        return "".join(self.chunks)[offset:]


class DebugController(Actor):
    """The job's debug sessions: every paused actor, its pdb output, and a way to type into it."""

    def __init__(self) -> None:
        self.sessions: dict[int, _Session] = {}
        self._ids = itertools.count(1)
        self._publish()

    def _publish(self) -> None:
        global _open
        _open = tuple(dict(info) for info in self._open_infos())

    def _open_infos(self) -> list[dict[str, Any]]:
        """The open sessions' infos, oldest first."""
        return [s.info for s in self.sessions.values() if not s.closed]

    @endpoint
    async def register(self, info: dict[str, Any], port: Any) -> int:
        """A paused actor opens a session; returns its id."""
        session_id = next(self._ids)
        self.sessions[session_id] = _Session(dict(info, id=session_id), port)
        self._publish()
        return session_id

    @endpoint
    async def output(self, session_id: int, text: str) -> None:
        """pdb wrote `text` (sent by the paused actor)."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.append(text)

    @endpoint
    async def ended(self, session_id: int) -> None:
        """The actor left pdb (continue or quit)."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.closed = True
            session.changed.set()
            self._publish()

    @endpoint
    async def list(self, print_output: bool = False) -> List[dict[str, Any]]:
        """The open sessions (actor name, rank, coords, host, function, line), oldest first."""
        infos = self._open_infos()
        if print_output:
            print(format_sessions(infos))
        return infos

    @endpoint
    async def send(self, session_id: int, line: str) -> bool:
        """Types one line into a session's pdb; False if the session is gone."""
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            return False
        session.port.send(line if line.endswith("\n") else line + "\n")
        return True

    @endpoint
    async def read(self, session_id: int, offset: int = 0,
                   timeout: float = 10.0) -> tuple[str, int, bool]:
        """pdb output after `offset` (waits up to `timeout` for some): (text, new offset, closed)."""
        session = self.sessions.get(session_id)
        if session is None:
            return "", offset, True
        if session.size <= offset and not session.closed:
            session.changed.clear()
            try:
                await asyncio.wait_for(session.changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return session.text_since(offset), session.size, session.closed

    @endpoint
    async def cast(self, actor_name: str, ranks: List[int] | None, line: str) -> List[int]:
        """Types `line` into every open session of `actor_name` at `ranks` (None: all)."""
        chosen = [s for s in self.sessions.values() if not s.closed
                  and s.info["actor_name"] == actor_name
                  and (ranks is None or s.info["rank"] in ranks)]
        for session in chosen:
            session.port.send(line + "\n")
        return [s.info["id"] for s in chosen]

    @endpoint
    async def continue_all(self) -> int:
        """Clears breakpoints and continues every open session; returns how many."""
        count = 0
        for session in self.sessions.values():
            if not session.closed:
                session.port.send("monarch_continue\n")
                count += 1
        return count


def debug_controller() -> Any:
    """The job's DebugController actor mesh (spawned in the controller on first use)."""
    from .._runtime._singletons import get_or_spawn_controller

    return get_or_spawn_controller(CONTROLLER_NAME, DebugController).get()


class _Output:
    """pdb's stdout: every write goes to the controller's session buffer."""

    def __init__(self, controller: Any, session_id: int) -> None:
        self._controller = controller
        self._session_id = session_id

    def write(self, text: str) -> int:
        if text:
            self._controller.output.broadcast(self._session_id, text)
        return len(text)

    def flush(self) -> None:
        pass


class _Input:
    """pdb's stdin: lines typed by whoever attached, received on a port."""

    def __init__(self, receiver: Any) -> None:
        self._receiver = receiver

    def readline(self) -> str:
        return self._receiver.recv().get()


class RemotePdb(pdb.Pdb):
    """A pdb whose terminal is a debug session served by the controller."""

    def __init__(self, controller: Any, session_id: int, receiver: Any) -> None:
        super().__init__(stdin=_Input(receiver),  # type: ignore[arg-type]
                         stdout=_Output(controller, session_id),  # type: ignore[arg-type]
                         nosigint=True)
        self.use_rawinput = False
        self._controller = controller
        self._session_id = session_id

    def do_monarch_continue(self, arg: str) -> bool:
        """Clears every breakpoint and continues (the debugger's `continue` for all sessions)."""
        self.clear_all_breaks()
        return bool(self.do_continue(arg))

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks:
            self._ended()

    def set_quit(self) -> None:
        super().set_quit()
        self._ended()

    def _ended(self) -> None:
        """Tells the controller the session ended, and waits until it knows: the actor goes
        on only then, so whoever sees its call return sees the session gone too (the admin
        API reads the open sessions without a message, `open_sessions`)."""
        try:
            self._controller.ended.call_one(self._session_id).get(timeout=ENDED_WAIT_S)
        except Exception:  # noqa: BLE001 - the controller is gone or slow: the actor goes on
            pass


def open_session(function: str, lineno: int) -> RemotePdb:
    """Registers a session for the current actor, paused in `function` at `lineno`; returns
    the session's pdb."""
    inst = context().actor_instance
    controller = debug_controller()
    port, receiver = Channel[str].open()
    info = {"actor_name": inst.name.rsplit("[", 1)[0], "rank": inst.rank.rank,
            "coords": dict(inst.rank), "hostname": socket.gethostname(), "pid": os.getpid(),
            "function": function, "lineno": lineno, "actor_id": inst.actor_id,
            "proc": inst.proc_id}
    session_id = controller.register.call_one(info, port).get()
    return RemotePdb(controller, session_id, receiver)


def breakpoint_hook(*args: Any, **kwargs: Any) -> None:
    """`sys.breakpointhook` in procs: pause this actor in a remote pdb session."""
    frame = sys._getframe(1)
    open_session(frame.f_code.co_name, frame.f_lineno).set_trace(frame)


def run_breaking(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Runs `fn` under a remote pdb that stops at its first line (break at next message)."""
    code = getattr(fn, "__code__", None)
    session = open_session(getattr(fn, "__name__", "?"), first_line(code) if code else 0)
    return session.runcall(fn, *args, **kwargs)


def first_line(code: Any) -> int:
    """The line pdb stops at in a call of `code`: its first statement. `co_firstlineno` is
    the `def` line, or the first decorator's (the console said 95 where pdb stopped at 98)."""
    import dis

    lines = [line for _, line in dis.findlinestarts(code)
             if line is not None and line > code.co_firstlineno]
    return min(lines) if lines else code.co_firstlineno


def install() -> None:
    """Makes `breakpoint()` open remote sessions in this process (procs call it at start)."""
    sys.breakpointhook = breakpoint_hook


def format_sessions(infos: list[dict[str, Any]]) -> str:
    """The session table, as Monarch prints it (a grid with these headers)."""
    headers = ["Actor Name", "Rank", "Coords", "Hostname", "Function", "Line No."]
    rows = [[str(i["actor_name"]), str(i["rank"]), str(i["coords"]), str(i["hostname"]),
             str(i["function"]), str(i["lineno"])] for i in infos]
    widths = [max([len(h)] + [len(r[c]) for r in rows]) for c, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    head_rule = rule.replace("-", "=")

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [rule, line(headers), head_rule]
    for row in rows:
        out += [line(row), rule]
    if not rows:
        out.append(rule)
    return "\n".join(out)
