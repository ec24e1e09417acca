"""Rank selections (`gpus=0:2`, `hosts=0, gpus=0:4`, ...) and the topology's latency median."""

from __future__ import annotations

import pytest

from monarch import telemetry
from monarch._controller._admin_views import p50_ms
from monarch.admin import SelectionError, parse_selection, select_ranks

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(("selection", "ranks"), [
    ("", [0, 1, 2, 3, 4, 5, 6, 7]),
    ("*", [0, 1, 2, 3, 4, 5, 6, 7]),
    ("gpus=0:2", [0, 1, 4, 5]),
    ("hosts=1", [4, 5, 6, 7]),
    ("hosts=0, gpus=0:4", [0, 1, 2, 3]),
    ("hosts=1,gpus=(1,3)", [5, 7]),
    ("gpus=::2", [0, 2, 4, 6]),
    ("gpus=2:", [2, 3, 6, 7]),
    (" gpus = 3 , hosts = 0 ", [3]),
])
def test_select_ranks(selection, ranks):
    assert select_ranks(selection, ["hosts", "gpus"], [2, 4]) == ranks


@pytest.mark.parametrize(("selection", "message"), [
    ("nodes=0", "unknown dimension 'nodes'; this mesh has: hosts, gpus"),
    ("gpus=4", "gpus=4 is out of range (size 4)"),
    ("gpus=0:9", "out of range"),
    ("gpus=x", "not an index, range or list"),
    ("gpus", "expected label=value"),
    ("gpus=2:2", "selects no rank"),
    ("gpus=0:4:0", "step must be positive"),
    ("gpus=(1,9)", "gpus=9 is out of range"),
    # a typo never widens the selection: each is refused, none selects more than it names
    ("gpus=0:2,gpus=1", "gpus is given twice"),
    ("gpus=(", "unbalanced parentheses"),
    ("gpus=()", "not an index, range or list"),
    ("gpus=(1,)", "not an index, range or list"),
    ("gpus=(1,2", "unbalanced parentheses"),
    ("hosts=0, gpus", "expected label=value"),
])
def test_bad_selections_say_why(selection, message):
    with pytest.raises(SelectionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        select_ranks(selection, ["hosts", "gpus"], [2, 4])


def test_parse_selection_and_a_mesh_of_one():
    assert parse_selection("hosts=0, gpus=(1,3)") == [("hosts", "0"), ("gpus", "(1,3)")]
    assert select_ranks("", [], []) == [0]


def test_p50_of_histograms():
    bounds = (0.001, 0.01, 0.1)
    a = telemetry.MetricPoint("h", "histogram", {}, 0.0, count=4, bounds=bounds,
                              buckets=(0, 4, 0, 0))
    b = telemetry.MetricPoint("h", "histogram", {}, 0.0, count=4, bounds=bounds,
                              buckets=(0, 0, 4, 0))
    assert p50_ms([a]) == pytest.approx(5.5)  # halfway through (1 ms, 10 ms]
    assert p50_ms([a, b]) == pytest.approx(10.0)
    assert p50_ms([]) is None
