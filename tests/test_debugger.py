"""The debugger: breakpoint() in an endpoint opens a real pdb session driven from the controller."""

from __future__ import annotations

import pytest
from waiting import wait_until

from monarch._actors._debug import format_sessions
from monarch.actor import Actor, debug_controller, endpoint

pytestmark = pytest.mark.timeout(60)


class Paused(Actor):
    def __init__(self) -> None:
        self.value = 41

    @endpoint
    def work(self, x: int) -> int:
        secret = x * 2
        breakpoint()
        return secret + 1

    @endpoint
    def plain(self, x: int) -> int:
        y = x + self.value
        return y


def read_until(ctrl, session_id, marker, offset=0, timeout=20.0):
    """Reads the session's output from `offset` until `marker` shows or the session closed;
    (text, next offset)."""
    read = {"text": "", "offset": offset, "closed": False}

    def seen() -> bool:
        chunk, read["offset"], read["closed"] = ctrl.read.call_one(
            session_id, read["offset"], 2.0).get(timeout=10)
        read["text"] += chunk
        return marker in read["text"] or read["closed"]

    wait_until(seen, lambda: f"{marker!r} in {read['text']!r}", timeout, interval=0)
    return read["text"], read["offset"]


def wait_sessions(ctrl, count, timeout=20.0):
    """Waits until the controller lists `count` sessions at least; returns them."""
    def listed() -> list | None:
        sessions = ctrl.list.call_one().get(timeout=10)
        return sessions if len(sessions) >= count else None

    return wait_until(listed, f"{count} debugger sessions", timeout)


def test_breakpoint_session_evaluates_and_continues(procs):
    mesh = procs.spawn("paused", Paused)
    ctrl = debug_controller()
    pending = mesh.slice(gpus=1).work.call_one(10)
    (session,) = wait_sessions(ctrl, 1)
    assert session["actor_name"] == "paused" and session["rank"] == 1
    assert session["coords"] == {"gpus": 1} and session["function"] == "work"
    table = format_sessions([session])
    assert "| Actor Name | Rank | Coords" in table and "paused" in table
    text, offset = read_until(ctrl, session["id"], "(Pdb) ")
    assert "breakpoint()" in text or "return secret + 1" in text
    assert ctrl.send.call_one(session["id"], "p secret * 100").get()
    text, offset = read_until(ctrl, session["id"], "2000", offset)
    ctrl.send.call_one(session["id"], "secret = 99").get()
    ctrl.send.call_one(session["id"], "c").get()
    assert pending.get(timeout=20) == 100
    assert ctrl.list.call_one().get() == []


def test_break_at_next_message_and_continue_all(procs):
    from monarch._controller._job import current_job

    mesh = procs.spawn("breakable", Paused)
    mesh.plain.call(0).get()
    job = current_job()
    proc = next(p for p in job.supervisor.procs.values() if p.procs == procs._procs
                and p.rank == 2)
    # The notice and the call below share one link (FIFO): the proc has set the flag before
    # the call reaches it.
    job.runtime.notify(proc.address, "break_next", {"mesh": mesh._mesh_id})
    pending = mesh.slice(gpus=2).plain.call_one(1)
    ctrl = debug_controller()
    (session,) = wait_sessions(ctrl, 1)
    assert session["function"] == "plain"
    text, _ = read_until(ctrl, session["id"], "(Pdb) ")
    # the line the session lists is the line pdb stops at (the first statement), not the
    # decorator's line (co_firstlineno): the console said 95 where pdb stopped at 98
    import inspect
    import re

    source, start = inspect.getsourcelines(Paused.plain)
    first = start + next(i for i, line in enumerate(source) if "y = x + self.value" in line)
    assert session["lineno"] == first
    assert re.search(rf"\({first}\)plain\(\)", text), text
    assert ctrl.continue_all.call_one().get() == 1
    assert pending.get(timeout=20) == 42


def test_debug_shell_list_attach_cast_continue(procs):
    import io

    from monarch._actors._debug_shell import ControllerBackend, DebugShell

    mesh = procs.spawn("shelled", Paused)
    pending = [mesh.slice(gpus=r).work.call_one(r) for r in range(3)]
    ctrl = debug_controller()
    wait_sessions(ctrl, 3)
    script = io.StringIO("list\nattach shelled 1\np secret\nsecret = 500\ndetach\n"
                         "cast shelled ranks(0,2) p secret + 1000\nbogus\nc\nq\n")
    out = io.StringIO()
    DebugShell(ControllerBackend(ctrl), script, out).run()
    text = out.getvalue()
    assert "MONARCH DEBUGGER" in text and "| shelled" in text and "monarch_dbg> " in text
    assert "(Pdb) 2\n" in text and "detached" in text
    assert "sent 'p secret + 1000' to 2 session(s)" in text
    # each rank's answer, printed as it comes (it appeared only on a later attach)
    assert "--- shelled[0] ---\n1000\n--- shelled[2] ---\n1004\n" in text
    assert "Error parsing input: not a command: 'bogus'" in text and "continued 3 session(s)" in text
    assert [p.get(timeout=20) for p in pending] == [1, 501, 5]
