"""`S` in `monarch top`: every rank of the selected mesh sampled at once, identical stacks
grouped, the odd rank out first; enter expands a group to its frames. Against a real job (this
pytest process is the controller of the session's procs) with one rank really stuck in a
handler; the refusals and API errors with the in-memory client."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drive import record_notifications, select, wait_for
from fakeclient import FakeClient
from monarch.console._stack_groups import StackGroupsScreen, frame_line, group_line
from monarch.console.app import MonarchTop
from screen_text import screen_text
from waiting import wait_until

from monarch.actor import Actor, context, endpoint
from monarch.admin import AdminError

pytestmark = pytest.mark.timeout(180)

SIZE = (170, 50)
MESH = "console_waiters"


class Waiter(Actor):
    """Rank `stuck` waits in `hold_the_line` until a file appears; the others answer.
    Module level so procs can unpickle it."""

    @endpoint
    def work(self, stuck: int, release: str) -> int:
        rank = context().actor_instance.rank.rank
        if rank == stuck:
            return hold_the_line(release)
        return rank


def hold_the_line(release: str) -> int:
    while not os.path.exists(release):
        time.sleep(0.01)  # the rank's own wait, not the test's
    return -1


@pytest.fixture
def stuck_rank(procs: Any, tmp_path: Path) -> Iterator[Any]:
    """An admin client of this session's job, whose `console_waiters` rank 2 waits in
    `hold_the_line` while ranks 0, 1 and 3 have answered (released and stopped after)."""
    from monarch._controller._job import current_job
    from monarch.admin import AdminClient

    job = current_job()
    assert job is not None and job.admin is not None
    admin = AdminClient(job.admin.address, job.admin.token)
    waiters = procs.spawn(MESH, Waiter)
    release = tmp_path / "release"
    calls = [waiters.slice(gpus=i).work.call_one(2, str(release)) for i in range(4)]
    try:
        def stuck() -> bool:  # rank 2 may still be importing this module, say: wait for it
            try:
                groups = admin.stacks(MESH)["groups"]
            except AdminError as exc:  # spawned, not yet known to the admin API
                if "no mesh" not in str(exc):
                    raise
                return False
            return ([g["ranks"] for g in groups] == [[2], [0, 1, 3]]
                    and "hold_the_line" in groups[0]["summary"]
                    and all(calls[r].done() for r in (0, 1, 3)))

        wait_until(stuck, "rank 2 stuck in hold_the_line, the others idle", 60)
        yield admin
    finally:
        release.touch()
        assert [c.get(timeout=30) for c in calls] == [0, 1, -1, 3]
        waiters.stop().get(timeout=30)


def stack_screen(app: MonarchTop, runs: int = 1) -> StackGroupsScreen | None:
    """The grouped stacks view once its `runs`-th sample is shown."""
    screen = app.screen
    return screen if isinstance(screen, StackGroupsScreen) and screen.runs >= runs else None


async def open_stacks(pilot: Any, app: MonarchTop) -> StackGroupsScreen:
    await pilot.press("S")
    return await wait_for(pilot, lambda: stack_screen(app), 60, "the grouped stacks")


async def test_the_stuck_rank_comes_first_and_expands_to_its_frames(stuck_rank):
    app = MonarchTop(stuck_rank, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, MESH)
        screen = await open_stacks(pilot, app)
        assert screen.error is None, screen.error
        assert screen.group_lines == ["rank 2: hold_the_line ← work  [running work]",
                                      "ranks 0-1,3: idle (waiting for a message)"]
        assert "4 ranks, 2 distinct stacks" in screen_text(app)
        await pilot.press("enter")  # the cursor starts on the odd one out
        odd = screen.groups_tree.root.children[0]
        await wait_for(pilot, lambda: odd.is_expanded, what="rank 2's group to expand")
        frames = [str(node.label) for node in odd.children]
        assert frames[-1].startswith(f"{__file__}:") and frames[-1].endswith(" in hold_the_line")
        assert frames[-2].endswith(" in work")
        await wait_for(pilot, lambda: "in hold_the_line" in screen_text(app),
                       what="the frames on screen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], what="back to the tree")

        # a slice asks only its ranks; an actor row asks its whole mesh
        await pilot.press("colon", *"gpus=0:2", "enter")
        await wait_for(pilot, lambda: app.slice is not None, what="the slice")
        screen = await open_stacks(pilot, app)
        assert screen.title_text.endswith("(gpus=0:2)")
        assert screen.group_lines == ["ranks 0-1: idle (waiting for a message)"]
        await pilot.press("escape")
        await select(pilot, f"{MESH}[3]")
        screen = await open_stacks(pilot, app)
        assert screen.group_lines[0].startswith("rank 2: hold_the_line")
        await pilot.press("escape")

        # a proc mesh has no actors' stacks: the API's refusal is shown, the console goes on
        procs = next(m["procs"] for m in app.snapshot.topology["meshes"] if m["name"] == MESH)
        procs_row = next(r for r in app.mesh_tree.rows_shown if r.ref == procs)
        await select(pilot, procs_row.label)
        screen = await open_stacks(pilot, app)
        assert screen.error and "proc mesh" in screen.error and screen.group_lines == []
        assert "proc mesh" in screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], what="back to the tree")


class Stacks(FakeClient):
    """The in-memory client with `stacks`: an error for `m2`, fixed groups otherwise."""

    def stacks(self, mesh: str, selection: str = "") -> dict[str, Any]:
        self.calls.append(("stacks", (mesh, selection)))
        if mesh == "m2":
            raise AdminError("no mesh 'm2'")
        return {"mesh": mesh, "name": "trainers", "groups": [
            {"ranks": [3], "summary": "TimeoutError: no answer", "running": [], "frames": [],
             "error": "TimeoutError: no answer"},
            {"ranks": [0, 1, 2], "summary": "idle (waiting for a message)", "running": [],
             "frames": [], "error": None}]}


class Ended(Stacks):
    def job(self) -> dict[str, Any]:
        return dict(super().job(), state="finished")


async def test_errors_are_shown_and_an_ended_job_has_no_stacks():
    client = Stacks()
    app = MonarchTop(client, refresh=0.1)
    async with app.run_test(size=(150, 40)) as pilot:
        await select(pilot, "trainers")
        screen = await open_stacks(pilot, app)
        assert screen.group_lines == ["rank 3: TimeoutError: no answer",
                                      "ranks 0-2: idle (waiting for a message)"]
        await pilot.press("escape")
        await select(pilot, "generators")
        screen = await open_stacks(pilot, app)
        assert screen.error == "AdminError: no mesh 'm2'" and screen.group_lines == []
        await pilot.press("r")  # sampled again: the same answer, still no crash
        await wait_for(pilot, lambda: stack_screen(app, runs=2), what="the second sample")
        await pilot.press("escape")
        assert client.calls == [("stacks", ("m1", "")), ("stacks", ("m2", "")),
                                ("stacks", ("m2", ""))]

    for client in (Ended(), FakeClient()):  # a job that ended; a history (no `stacks`)
        await refuses_stacks(client)


async def refuses_stacks(client: FakeClient) -> None:
    """`S` on this client's console warns that stacks need a live job, and asks nothing."""
    app = MonarchTop(client, refresh=0.1)
    shown = record_notifications(app)
    async with app.run_test(size=(150, 40), notifications=True) as pilot:
        await select(pilot, "trainers")
        await pilot.press("S")
        await wait_for(pilot, lambda: any("stacks need a live job" in m for m in shown),
                       what="the refusal")
        assert app.screen is app.screen_stack[0] and not client.calls


def test_group_and_frame_lines():
    assert str(group_line({"ranks": [2], "summary": "hold_the_line ← work",
                           "running": ["work"], "frames": [["a.py", 3, "work"]],
                           "error": None})) == "rank 2: hold_the_line ← work  [running work]"
    idle = group_line({"ranks": [0, 1, 3], "summary": "idle (waiting for a message)",
                       "running": [], "frames": [], "error": None})
    assert str(idle) == "ranks 0-1,3: idle (waiting for a message)" and idle.style == "dim"
    assert group_line({"ranks": [5], "summary": "gone", "running": [], "frames": [],
                       "error": "gone"}).style == "red"
    assert str(frame_line(["/x/train.py", 12, "step"])) == "/x/train.py:12 in step"
