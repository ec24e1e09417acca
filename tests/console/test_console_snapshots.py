"""SVG snapshots pin the console's layout: the main screen with a failed rank selected, the
slice input, the kill confirmation, the help, the diagnostics and py-spy overlays, the grid, a
resource table (`:tensors`), the grouped stacks and the timeline's axes and lanes.

The data is the in-memory client's (fixed values), so only the layout can move; volatile text
(clock times, the refresh rate, Rich's content-hash class names) is normalized. Run with
`UPDATE_SNAPSHOTS=1` to accept a change; a mismatch writes `<name>.new.svg` beside the stored one.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest
from drive import select, wait_for
from fakeclient import FakeClient
from monarch.console.app import MonarchTop

pytestmark = pytest.mark.timeout(60)

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZE = (150, 42)
LOGS = [{"hlc": (10 + i) << 20, "time": 1.7e9 + i / 4, "stream": "stderr" if i == 7 else "stdout",
         "level": 20, "text": text, "mesh": mesh, "rank": rank, "proc": f"p.{rank}"}
        for i, (mesh, rank, text) in enumerate(
            [("trainers", r, "syncing gradients") for r in range(3)]
            + [("trainers", 0, "step 4 loss 1.2041"), ("trainers", 1, "step 4 loss 1.2563"),
               ("generators", 0, "generated 128 tokens"), ("generators", 1, "weights v2"),
               ("trainers", 3, "RuntimeError: boom")])]


def normalize(svg: str) -> str:
    """Drops what changes from run to run without the layout changing."""
    svg = re.sub(r"terminal-\d+", "terminal", svg)
    svg = re.sub(r"\d\d:\d\d:\d\d", "hh:mm:ss", svg)
    return re.sub(r"(&#160;)*[\d.]+(?=(&#160;|\s)fps)", "N", svg)


async def check(pilot, name: str, timeout: float = 15.0) -> None:
    """Waits until the screen matches the stored snapshot (the app may still be drawing what
    the last key asked for), or fails with the first difference after `timeout`."""
    app = pilot.app
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("UPDATE_SNAPSHOTS") or not path.exists():
        svg = await _steady(pilot, name)
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        if not os.environ.get("UPDATE_SNAPSHOTS"):
            pytest.fail(f"new snapshot {path} written: look at it, then commit it")
        return
    expected = path.read_text()
    latest = [""]

    def matches() -> bool:
        latest[0] = normalize(app.export_screenshot(title=name))
        return latest[0] == expected

    try:
        await wait_for(pilot, matches, timeout, f"the screen to match {name}")
    except AssertionError:
        path.with_suffix(".new.svg").write_text(latest[0])
        pytest.fail(f"{name} changed (see {path.with_suffix('.new.svg')}); first difference: "
                    f"{_first_difference(expected, latest[0])}")


async def _steady(pilot, name: str, polls: int = 10) -> str:
    """The screenshot once it stayed the same for `polls` checks in a row (50 ms apart)."""
    seen, same = "", 0
    while same < polls:
        svg = normalize(pilot.app.export_screenshot(title=name))
        same = same + 1 if svg == seen else 0
        seen = svg
        await pilot.pause(0.05)
    return seen


def _first_difference(old: str, new: str) -> str:
    def texts(svg: str) -> list[str]:
        return [html.unescape(t) for t in re.findall(r">([^<>]+)</text>", svg)]

    for a, b in zip(texts(old), texts(new)):
        if a != b:
            return f"{a!r} -> {b!r}"
    return "styles or positions"


async def started(pilot) -> MonarchTop:
    from textual.widgets import Input

    app = pilot.app
    for field in app.query(Input):  # a blinking cursor would make the screen never settle
        field.cursor_blink = False
    await wait_for(pilot, lambda: app.feed.statistics().polls >= 2 and app.snapshot.job
                   and app.log_pane.shown_lines)
    await wait_for(pilot, lambda: all(r.rate is not None for r in app.mesh_tree.rows_shown
                                      if r.kind == "actor"))
    return app


def fake() -> FakeClient:
    client = FakeClient()
    client.log_records = LOGS
    return client


async def test_main_screen_with_a_failed_rank():
    app = MonarchTop(fake(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, "trainers[3]")
        await check(pilot, "main_failed_rank")


async def test_slice_input_and_kill_confirmation():
    app = MonarchTop(fake(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, "trainers")
        await pilot.press("colon", *"gpus=1:3")
        await check(pilot, "slice_input")
        await pilot.press("enter")
        await pilot.press("k")
        await check(pilot, "confirm_kill")


async def test_help_overlay():
    app = MonarchTop(fake(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("question_mark")
        await check(pilot, "help")


async def test_diagnostics_and_stack_overlays():
    app = MonarchTop(fake(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("d")
        await wait_for(pilot, lambda: getattr(app.screen, "runs", 0) == 1)
        await check(pilot, "diagnostics")
        await pilot.press("escape")
        await select(pilot, "trainers[1]")
        await pilot.press("p")
        await wait_for(pilot, lambda: getattr(app.screen, "runs", 0) == 1)
        await check(pilot, "py_spy")


async def test_grid_of_a_mesh_with_a_failed_rank_and_marked_cells():
    app = MonarchTop(fake(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, "trainers")
        await pilot.press("v", "right", "space", "right", "space", "m")
        await wait_for(pilot, lambda: getattr(app.screen, "measure", "") == "queue")
        await check(pilot, "grid_queue")


class WithMore(FakeClient):
    """The in-memory client with a tensor engine on the trainers' procs and grouped stacks."""

    def __init__(self) -> None:
        super().__init__()
        self.topo["tensor_engines"] = [{"mesh": "m1", "ops": 1240, "batches": 31,
                                        "tensors": 17}]
        self.log_records = LOGS

    def stacks(self, mesh: str, selection: str = "") -> dict:
        frames = [["train.py", 40, "train_step"], ["train.py", 12, "all_reduce"]]
        return {"mesh": mesh, "name": "trainers", "groups": [
            {"ranks": [2], "summary": "load_batch ← train_step", "running": ["train_step"],
             "frames": [["train.py", 40, "train_step"], ["data.py", 7, "load_batch"]],
             "error": None},
            {"ranks": [0, 1], "summary": "all_reduce ← train_step", "running": ["train_step"],
             "frames": frames, "error": None}]}


async def test_a_resource_table_and_grouped_stacks():
    app = MonarchTop(WithMore(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("colon", *"tensors", "enter")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ResourceScreen"
                       and app.screen.items)
        await check(pilot, "tensors_table")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0])
        await select(pilot, "trainers")
        await pilot.press("S")
        await wait_for(pilot, lambda: getattr(app.screen, "runs", 0) == 1)
        await check(pilot, "stack_groups")


async def test_timeline_of_a_mesh():
    app = MonarchTop(WithMore(), refresh=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await select(pilot, "trainers")
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TimelineScreen"
                       and getattr(app.screen, "shown", None) is not None)
        await check(pilot, "timeline")
