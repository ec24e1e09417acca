"""`t` in `monarch top`: the selected mesh's last seconds of spans as bars, one lane per rank.
The model is checked as a pure function (buckets, inner spans winning, running handlers
reaching `now`); the screen against the demo workload's 16 `workers` (rank 11 slower: its lane
is mostly `slow_batch`, the others' `batch`), zoomed with +/-."""

from __future__ import annotations

import pytest
from demojob import DemoJob
from drive import select, wait_for
from monarch.console import _timeline as timeline
from monarch.console._timeline_view import TimelineScreen
from monarch.console.app import MonarchTop
from screen_text import screen_text

pytestmark = pytest.mark.timeout(240)

S = 1_000_000_000


def test_spans_fill_their_buckets_and_the_innermost_wins():
    now = 100 * S
    spans = [{"rank": 0, "name": "step", "start_ns": 90 * S, "end_ns": 96 * S},
             {"rank": 0, "name": "all_reduce", "start_ns": 92 * S, "end_ns": 94 * S},
             {"rank": 1, "name": "step", "start_ns": 80 * S, "end_ns": 91 * S},  # clipped
             {"rank": 7, "name": "other", "start_ns": 95 * S, "end_ns": 96 * S}]  # no lane
    shown = timeline.build(spans, [0, 1, 2], now, 10.0, 10, running={2: ("train", 97.0)})
    lanes = {lane.rank: lane.cells for lane in shown.lanes}
    assert lanes[0] == ("step", "step", "all_reduce", "all_reduce", "step", "step",
                        None, None, None, None)
    assert lanes[1] == ("step",) + (None,) * 9
    assert lanes[2] == (None,) * 7 + ("train",) * 3  # running since 97 s: up to now
    assert shown.lanes[2].running == "train" and shown.lanes[0].running == ""
    assert [name for name, _ in shown.names] == ["step", "train", "all_reduce"]
    assert dict(shown.names)["step"] == pytest.approx(6 + 1)  # 90-96 whole; 90-91 clipped
    assert timeline.busy_share(shown.lanes[0]) == 0.6
    assert timeline.axis(20, 10.0) == "-10s     -5s     now"


def test_nothing_in_the_window_is_an_empty_timeline():
    shown = timeline.build([{"rank": 0, "name": "old", "start_ns": 0, "end_ns": S}], [0],
                           100 * S, 5.0, 8)
    assert shown.lanes[0].cells == (None,) * 8 and shown.names == ()


async def test_the_timeline_of_a_mesh_with_a_slow_rank(tmp_path):
    job = DemoJob(tmp_path, "--grid", "16")
    try:
        job.wait_until(lambda: any(m["name"] == "workers" and len(m["actors"]) == 16
                                   for m in job.client.topology()["meshes"]), 90, "workers")
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
            await wait_for(pilot, lambda: "train" in dict(screen.shown.names),
                           60, "trainers[1]'s train spans")
    finally:
        job.stop()
