"""`t` in `monarch top`: the timeline's model as a pure function (buckets, inner spans winning,
running handlers reaching `now`). The screen is tested against the demo's workers beside the
grid (`test_console_grid.py`: one job for both)."""

from __future__ import annotations

import pytest
from monarch.console import _timeline as timeline

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
