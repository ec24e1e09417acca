"""Attaching a terminal to one debugger session: pdb's output printed, typed lines sent.

The same I/O as the `monarch_dbg>` shell's `attach` (`monarch._actors._debug_shell`), addressed by
session id. The console runs it with the real terminal handed over (`App.suspend()`).
"""

from __future__ import annotations

from typing import Any, Protocol, TextIO

PROMPT = "(Pdb) "


class Sessions(Protocol):
    """The debugger half of the admin client (the `DebugBackend` protocol)."""

    def send(self, session_id: int, line: str) -> bool: ...

    def read(self, session_id: int, offset: int, timeout: float) -> tuple[str, int, bool]: ...


def attach(client: Sessions, session: dict[str, Any], stdin: TextIO, stdout: TextIO) -> bool:
    """Drives `session`'s pdb from `stdin`/`stdout` until it ends (True) or the user detaches
    with `detach`, end of input or Ctrl-C (False: the actor stays paused)."""
    label = f"{session.get('actor_name')}[{session.get('rank')}]"
    _write(stdout, f"\n--- attached to {label}: pdb in {session.get('function')} line "
                   f"{session.get('lineno')} · `c` continues the actor · `detach` or Ctrl-D "
                   "returns to monarch top ---\n")
    try:
        offset, closed = pump(client, session["id"], 0, stdout)
        while not closed:
            line = stdin.readline()
            if not line or line.strip() == "detach":
                _write(stdout, f"\n--- detached; {label} stays paused ---\n")
                return False
            client.send(session["id"], line.rstrip("\n"))
            offset, closed = pump(client, session["id"], offset, stdout)
    except KeyboardInterrupt:
        _write(stdout, f"\n--- detached; {label} stays paused ---\n")
        return False
    _write(stdout, f"\n--- session {label} ended ---\n")
    return True


def pump(client: Sessions, session_id: int, offset: int, stdout: TextIO) -> tuple[int, bool]:
    """Copies pdb's output to `stdout` until it prompts again or the session ends."""
    while True:
        text, offset, closed = client.read(session_id, offset, 5.0)
        _write(stdout, text)
        if closed or text.endswith(PROMPT):
            return offset, closed


def _write(stdout: TextIO, text: str) -> None:
    if text:
        stdout.write(text)
        stdout.flush()
