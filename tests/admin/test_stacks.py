"""Stacks across ranks, grouped (`/v1/stacks`, `monarch stack MESH --group`): which ranks are
somewhere else, and where — with real procs, a rank really stuck in a handler."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import wait_until

from monarch.actor import Actor, context, endpoint
from monarch.admin import AdminError

pytestmark = pytest.mark.timeout(120)


class Waiter(Actor):
    """Rank `stuck` waits in `hold_the_line` until a file appears; the others answer."""

    @endpoint
    def work(self, stuck: int, release: str) -> int:
        rank = context().actor_instance.rank.rank  # its rank in the mesh (not in the call's view)
        if rank == stuck:
            return hold_the_line(release)
        return rank


def hold_the_line(release: str) -> int:
    while not os.path.exists(release):
        time.sleep(0.01)
    return -1


def test_the_odd_rank_out_is_named_first_with_its_stack(admin, procs, tmp_path: Path) -> None:
    waiters = procs.spawn("stack_waiters", Waiter)
    release = tmp_path / "release"
    # one call per rank (a call to several actors may be held until the script waits)
    calls = [waiters.slice(gpus=i).work.call_one(2, str(release)) for i in range(4)]

    def stuck() -> dict | None:  # until the others have answered and rank 2 waits
        result = admin.stacks("stack_waiters")
        ranks = [g["ranks"] for g in result["groups"]]
        return result if ranks == [[2], [0, 1, 3]] and all(c.done() for c in (
            calls[0], calls[1], calls[3])) and "hold_the_line" in result["groups"][0][
            "summary"] and result["groups"][1]["summary"].startswith("idle") else None
        # (rank 2 may still be importing this module, the others something of their own)

    try:
        result = wait_until(stuck, "rank 2 stuck in hold_the_line, the others idle")
    except BaseException:
        release.touch()  # a rank left in its handler would change every later topology
        raise
    odd, rest = result["groups"]
    assert odd["ranks"] == [2] and rest["ranks"] == [0, 1, 3]
    assert odd["summary"] == "hold_the_line ← work" and odd["running"] == ["work"]
    assert [f[2] for f in odd["frames"]][-2:] == ["work", "hold_the_line"]
    assert odd["frames"][-1][0] == __file__
    assert rest["summary"].startswith("idle") and rest["frames"] == [] and not rest["error"]
    # a slice asks only its ranks
    assert [g["ranks"] for g in admin.stacks("stack_waiters", "gpus=0:2")["groups"]] == [[0, 1]]

    from monarch.cli._app import app

    out = CliRunner().invoke(app, ["--addr", admin.address, "--token", admin.token, "stack",
                                   "stack_waiters", "--group"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[1] == "  rank 2: hold_the_line ← work  [running work]"
    assert lines[2].startswith("  ranks 0-1,3: idle")
    assert f"  {__file__}:" in out.output and "in hold_the_line" in out.output
    release.touch()
    assert [c.get(timeout=30) for c in calls] == [0, 1, -1, 3]


def test_stacks_refusals(admin, procs) -> None:
    with pytest.raises(AdminError, match="no mesh 'nope'"):
        admin.stacks("nope")
    waiters = procs.spawn("stack_refusals", Waiter)
    waiters.initialized.get(timeout=30)
    with pytest.raises(AdminError, match="unknown"):
        admin.stacks("stack_refusals", "cpus=0")
