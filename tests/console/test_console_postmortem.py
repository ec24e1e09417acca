"""The new views on a job that has ended (`monarch top --job ID`: its Parquet history): the
grid, a resource table and the span timeline work read-only on the demo's history, its
actions refused. The demo runs with its history on, steps a while, and stops."""

from __future__ import annotations

import shutil

import pytest
from demojob import DemoJob
from drive import record_notifications, select, wait_for
from monarch.console._grid_view import GridScreen
from monarch.console._resource_view import ResourceScreen
from monarch.console._timeline_view import TimelineScreen
from monarch.console.app import MonarchTop
from screen_text import screen_text

from monarch._history._client import HistoryClient
from monarch.admin import open_history

pytestmark = pytest.mark.timeout(240)


async def test_grid_resources_and_timeline_of_an_ended_job(tmp_path, monkeypatch):
    job = DemoJob(tmp_path, "--grid", "8", env={"MONARCH_HISTORY": "1"})
    try:
        def stepped() -> bool:  # every worker has stepped for 6 s or more
            points = [m for m in job.client.metrics(by_process=True) if m["name"] == "step"]
            return len(points) == 8 and min(p["value"] for p in points) >= 30

        job.wait_until(stepped, 90, "the workers to step")
        job_id = job.info["job_id"]
        job._stop()
        monkeypatch.setenv("MONARCH_RUN_DIR", str(job.run_dir))
        client = HistoryClient(open_history(job_id))
        app = MonarchTop(client, refresh=0.3)
        shown = record_notifications(app)
        async with app.run_test(size=(150, 40), notifications=True) as pilot:
            await select(pilot, "workers", 60)
            await pilot.press("v")
            grid = await wait_for(pilot, lambda: app.screen if isinstance(
                app.screen, GridScreen) else None, what="the grid")
            await wait_for(pilot, lambda: grid.cells.grid is not None
                           and len(grid.cells.grid.cells) == 8, what="8 cells")
            assert "grid workers {dp: 1, tp: 8}" in screen_text(app)
            await pilot.press("k")  # the job has ended: refused, and said so
            await wait_for(pilot, lambda: any("has ended" in m for m in shown),
                           what="kill refused")
            await pilot.press("escape")

            await pilot.press("t")
            line = await wait_for(pilot, lambda: app.screen if isinstance(
                app.screen, TimelineScreen) else None, what="the timeline")

            await pilot.press("minus")  # the last 5 s: the job stepped at least that long

            def lanes_busy() -> bool:  # the window ends at the newest span: bars, not idle
                # (a quarter of each lane at least: the job's last seconds hold its stop too,
                # longer under load; a full run once saw less than half)
                tl = line.shown
                return tl is not None and len(tl.lanes) == 8 and all(
                    sum(c is not None for c in lane.cells) > len(lane.cells) / 4
                    and {"batch", "slow_batch"} & set(lane.cells) for lane in tl.lanes)

            await wait_for(pilot, lanes_busy, 60,
                           lambda: f"8 busy lanes from the history: {screen_text(app)}")
            await pilot.press("colon", *"meshes", "enter")
            table = await wait_for(pilot, lambda: app.screen if isinstance(
                app.screen, ResourceScreen) and app.screen.items else None, what=":meshes")
            assert "workers" in [item.cells[0] for item in table.items]
    finally:
        job._stop()
        shutil.rmtree(job.run_dir, ignore_errors=True)
