"""`v` in `monarch top`: a mesh as its grid. Against the demo workload with a `workers` mesh of
16 ranks (`dp × tp` = 2 × 8) stepping in calls of their own, rank 11 slower: the grid
shows its shape, `M` colours it by the gauge `step` and marks the laggard, `:` marks a slice
of cells and `k` kills exactly those ranks, `S` groups the stacks of the marked cells. The
refusals of a read-only console with the in-memory client."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from demojob import DemoJob
from drive import record_notifications, select, wait_for
from fakeclient import FakeClient
from monarch.console._confirm import ConfirmScreen
from monarch.console._grid_view import GridScreen
from monarch.console._stack_groups import StackGroupsScreen
from monarch.console._timeline_view import TimelineScreen
from monarch.console.app import MonarchTop
from screen_text import screen_text

pytestmark = pytest.mark.timeout(240)

SIZE = (150, 40)
LAGGARD = 11  # the demo's laggard_of(16)


def grid_screen(app: MonarchTop) -> GridScreen | None:
    return app.screen if isinstance(app.screen, GridScreen) else None


def states(job: DemoJob) -> dict[int, str]:
    """The workers' states by rank ({} until the mesh is spawned)."""
    found = [m for m in job.client.topology()["meshes"] if m["name"] == "workers"]
    return {a["rank"]: a["state"] for a in found[0]["actors"]} if found else {}


@pytest.fixture(scope="module")
def grid_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoJob]:
    """The demo with 16 workers, shared by the timeline's test and the grid's (last: it kills
    four of them)."""
    job = DemoJob(tmp_path_factory.mktemp("grid"), "--grid", "16")
    try:
        job.wait_until(lambda: len(states(job)) == 16 and set(states(job).values()) ==
                       {"running"}, 90, "16 workers running")
        yield job
    finally:
        job.stop()


async def test_the_timeline_of_a_mesh_with_a_slow_rank(grid_job):
    job = grid_job
    app = MonarchTop(job.client, refresh=0.3)
    async with app.run_test(size=(150, 40)) as pilot:
        await select(pilot, "workers")
        await pilot.press("t")
        screen = await wait_for(pilot, lambda: app.screen if isinstance(
            app.screen, TimelineScreen) else None, what="the timeline")

        def slow_lane_mostly_slow_batch() -> bool:
            shown = screen.shown
            if shown is None or len(shown.lanes) != 16:
                return False
            lane = {lane.rank: lane for lane in shown.lanes}
            slow = lane[11].cells.count("slow_batch")
            return slow > len(lane[11].cells) / 2 and "slow_batch" not in lane[10].cells \
                and lane[10].cells.count("batch") > len(lane[10].cells) / 2

        await wait_for(pilot, slow_lane_mostly_slow_batch, 90,
                       lambda: f"rank 11's lane in slow_batch: {screen_text(app)}")
        text = screen_text(app)
        assert "timeline workers · last 10 s · 16 lane(s)" in text
        assert "workers[11] " in text and "-10s" in text and "now" in text
        assert "slow_batch" in text and "train_steps" in text  # the legend
        await pilot.press("plus")
        await wait_for(pilot, lambda: "last 30 s" in screen_text(app), what="zoomed out")
        await pilot.press("minus", "minus")
        await wait_for(pilot, lambda: "last 5 s" in screen_text(app), what="zoomed in")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], what="back")
        await select(pilot, "trainers[1]")  # an actor: its lane only
        await pilot.press("colon", *"timeline", "enter")
        screen = await wait_for(pilot, lambda: app.screen if isinstance(
            app.screen, TimelineScreen) else None, what=":timeline")
        await wait_for(pilot, lambda: screen.shown is not None and [
            lane.rank for lane in screen.shown.lanes] == [1], what="one lane")
        await wait_for(pilot, lambda: any("train" in name for name, _ in screen.shown.names),
                       90, lambda: f"trainers[1]'s train spans: {screen.shown.names}")


async def test_a_closed_mesh_comes_folded_and_opening_it_brings_its_rows(grid_job):
    """Issue 32: the console asks the job for the actors of the meshes it shows open; a
    closed mesh comes folded (a summary by host), so at a thousand actors a poll costs the
    controller what the screen shows. Opening the mesh brings its 16 rows at once; the grid of
    a closed mesh still has every cell."""
    job = grid_job
    app = MonarchTop(job.client, refresh=0.3)

    def workers() -> dict | None:
        found = [m for m in (app.snapshot.topology or {}).get("meshes", [])
                 if m["name"] == "workers"]
        return found[0] if found else None

    def actor_rows() -> list[str]:
        return [r.label for r in app.mesh_tree.rows_shown if r.label.startswith("workers[")]

    async with app.run_test(size=SIZE) as pilot:
        row = await select(pilot, "workers")
        await wait_for(pilot, lambda: len(actor_rows()) == 16, what="16 rows, open")
        assert "folded" not in workers() and row.ref in app.feed.rows
        await pilot.press("left")  # closed: the job sends it folded from the next poll
        await wait_for(pilot, lambda: row.ref not in app.feed.rows, what="not asked")
        mesh = await wait_for(pilot, lambda: (m := workers()) and "folded" in m and m,
                              what="the mesh folded")
        assert actor_rows() == [] and mesh["actors"] == []  # every worker runs
        (summary,) = mesh["folded"].values()
        assert summary["actors"] == 16 and summary["states"] == {"running": 16}
        assert len(mesh["rank_procs"]) == 16
        shown = await wait_for(pilot, lambda: (r := app.mesh_tree.selected) and r.label ==
                               "workers" and r.rate and r)  # messages/s of the summary
        assert shown.state == "running" and not shown.expanded and shown.expandable
        assert shown.last_method and shown.note.startswith("Worker {dp: 2, tp: 8}")
        await pilot.press("v")  # the grid asks for the rows of its mesh
        screen = await wait_for(pilot, lambda: grid_screen(app), what="the grid")
        await wait_for(pilot, lambda: screen.cells.grid is not None
                       and len(screen.cells.grid.cells) == 16, what="16 cells")
        assert row.ref in app.feed.rows
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], what="back")
        await wait_for(pilot, lambda: row.ref not in app.feed.rows, what="folded again")
        await pilot.press("right")  # opened: its rows at the next poll (asked at once)
        await wait_for(pilot, lambda: len(actor_rows()) == 16, what="16 rows again")
        assert "folded" not in workers()


async def test_the_grid_shows_the_shape_the_laggard_and_kills_the_marked_cells(grid_job):
    job = grid_job
    app = MonarchTop(job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "workers")
        await pilot.press("v")
        screen = await wait_for(pilot, lambda: grid_screen(app), what="the grid")
        await wait_for(pilot, lambda: screen.cells.grid is not None
                       and len(screen.cells.grid.cells) == 16, what="16 cells")
        shown = screen.cells.grid
        assert [label for label, _ in shown.rows] == ["dp=0", "dp=1"]
        assert [len(cells) for _, cells in shown.rows] == [8, 8]
        text = screen_text(app)
        assert "grid workers {dp: 2, tp: 8} · state · 16 ranks" in text
        assert re.search(r"dp=0 (● ){7}●", text) and re.search(r"dp=1 (● ){7}●", text)

        # the gauge `step`: rank 11 falls behind, and only rank 11
        await pilot.press("M")
        await wait_for(pilot, lambda: screen.metric == "step" and [
            c.rank for c in screen.cells.grid.cells if c.lagging] == [LAGGARD],
            90, "rank 11 lagging by its step")
        await wait_for(pilot, lambda: "metric step (max" in screen_text(app)
                       and "1 lagging ‹" in screen_text(app), what="the headline")
        rows = [line for line in screen_text(app).splitlines() if " dp=" in line]
        assert "‹" in rows[1] and "‹" not in rows[0]  # dp=1's row carries the mark
        for _ in range(3):  # the cursor to rank 11 = (dp=1, tp=3)
            await pilot.press("right")
        await pilot.press("down")
        await wait_for(pilot, lambda: screen.under_cursor().rank == LAGGARD,
                       what="the cursor on rank 11")
        await wait_for(pilot, lambda: re.search(
            r"rank 11 \(dp=1, tp=3\) · running · metric \d+ · in train_steps · procs-",
            screen_text(app)), what=lambda: f"the cursor's rank described: {screen_text(app)}")

        # stacks of two marked cells: the laggard apart from a rank in step
        await pilot.press("space", "left", "space")
        await wait_for(pilot, lambda: screen.cells.marked == {10, 11}, what="two marks")
        await pilot.press("S")
        stacks = await wait_for(pilot, lambda: app.screen if isinstance(
            app.screen, StackGroupsScreen) and app.screen.runs else None, 60, "stacks")
        assert stacks.title_text == "stacks: workers (dp=1, tp=2:4)"
        both_busy = ["rank 10: batch ← train_steps  [running train_steps]",
                     "rank 11: slow_batch ← train_steps  [running train_steps]"]
        for _ in range(20):  # a rank is idle for a moment between its calls: sample again
            if sorted(stacks.group_lines) == both_busy:
                break
            runs = stacks.runs
            await pilot.press("r")
            await wait_for(pilot, lambda runs=runs: stacks.runs > runs, 60, "another sample")
        assert sorted(stacks.group_lines) == both_busy  # two groups of one: rank order
        await pilot.press("escape")
        await wait_for(pilot, lambda: grid_screen(app), what="back to the grid")

        # a slice marks cells; k kills exactly them, after confirmation
        await pilot.press("x", "colon", *"tp=6:8", "enter")
        await wait_for(pilot, lambda: screen.cells.marked == {6, 7, 14, 15},
                       what="the slice marked")
        assert "4 marked" in screen_text(app)
        await pilot.press("k")
        confirm = await wait_for(pilot, lambda: app.screen if isinstance(
            app.screen, ConfirmScreen) else None, what="the confirmation")
        assert confirm.question == "Kill workers ranks 6-7,14-15 (dp=0, tp=6:8; dp=1, " \
                                   "tp=6:8)?"
        await pilot.press("y")
        job.wait_until(lambda: {r for r, s in states(job).items() if s != "running"}
                       == {6, 7, 14, 15}, 60, "ranks 6, 7, 14, 15 killed, no other")
        await wait_for(pilot, lambda: {c.rank for c in screen.cells.grid.cells
                                       if c.state == "failed"} == {6, 7, 14, 15},
                       60, "the killed cells failed on the grid")
        assert "4 failed" in screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0],
                       what="back to the tree")


async def test_a_read_only_console_refuses_every_action_that_changes_the_job():
    client = FakeClient()
    app = MonarchTop(client, refresh=0.1, read_only=True)
    shown = record_notifications(app)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await select(pilot, "trainers")
        for key in ("k", "s", "b", "a", "C"):
            await pilot.press(key)
            await wait_for(pilot, lambda key=key: len(shown) == ("ksbaC".index(key) + 1),
                           what=f"{key} refused")
            assert app.screen is app.screen_stack[0]  # no confirmation opened
        assert all("read-only console (monarch top --read-only)" in m for m in shown), shown
        await pilot.press("v")  # looking is allowed: the grid, then kill refused there too
        screen = await wait_for(pilot, lambda: grid_screen(app), what="the grid")
        await pilot.press("k")
        await wait_for(pilot, lambda: len(shown) == 6, what="k refused on the grid")
        assert isinstance(app.screen, GridScreen) and "read-only" in shown[-1]
        assert screen.cells.grid is not None and len(screen.cells.grid.cells) == 4
    assert [name for name, _ in client.calls] == []


async def test_v_needs_an_actor_mesh_and_the_grid_follows_the_selected_actor():
    app = MonarchTop(FakeClient(), refresh=0.1)
    shown = record_notifications(app)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await select(pilot, "box")
        await pilot.press("v")
        await wait_for(pilot, lambda: shown, what="the warning")
        assert "select an actor mesh" in shown[0] and app.screen is app.screen_stack[0]
        await select(pilot, "generators[1]")
        await pilot.press("v")
        screen = await wait_for(pilot, lambda: grid_screen(app), what="the grid")
        assert screen.mesh_id == "m2"
        await wait_for(pilot, lambda: "grid generators {gpus: 2}" in screen_text(app),
                       what="the generators' grid")
        await pilot.press("m")  # state → queue
        await wait_for(pilot, lambda: "queue (max 0 msgs)" in screen_text(app),
                       what="the queue measure")


async def test_the_tree_is_rebuilt_once_the_view_over_it_closes():
    """Under a view the tree is not rebuilt each poll (a thousand rows); escape shows it as the
    newest poll has it."""
    client = FakeClient()
    app = MonarchTop(client, refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "trainers")
        await pilot.press("v")
        await wait_for(pilot, lambda: grid_screen(app), what="the grid")
        renders = app.mesh_tree.rows_shown
        extra = {**client.topo["meshes"][1], "mesh": "m3", "name": "critics"}
        client.topo["meshes"].append(extra)
        await wait_for(pilot, lambda: any(m["name"] == "critics" for m in
                                          app.snapshot.topology["meshes"]), what="a poll")
        await wait_for(pilot, lambda: app._tree_stale, what="the tree marked stale")
        assert app.mesh_tree.rows_shown is renders
        await pilot.press("escape")
        await wait_for(pilot, lambda: any("critics" in r.label
                                          for r in app.mesh_tree.rows_shown),
                       what="critics in the tree")
