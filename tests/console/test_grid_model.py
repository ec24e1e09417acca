"""The grid's model: where ranks sit, what a cell shows, who lags, and the selection text of a
set of cells (what kill and stop send), checked against the admin API's own reading."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from monarch.console import _grid as grid
from monarch.console._model import Snapshot

from monarch.admin import SelectionError, select_ranks


def mesh_2d(states: dict[int, str] | None = None) -> dict[str, Any]:
    """A `dp × tp` = 2 × 4 mesh, rank r on proc p.r; rank 5 runs `step` for 3.5 s."""
    actors = []
    for r in range(8):
        actors.append({"rank": r, "proc": f"p.{r}", "state": (states or {}).get(r, "running"),
                       "point": {"dp": r // 4, "tp": r % 4}, "messages": 10 * r,
                       "queue_depth": r % 3,
                       "running": [{"method": "step", "running_s": 3.5}] if r == 5 else []})
    return {"mesh": "m", "name": "workers", "class_name": "Worker", "procs": "p",
            "extent": {"labels": ["dp", "tp"], "sizes": [2, 4]}, "actors": actors}


def snapshot(mesh: dict[str, Any]) -> Snapshot:
    procs = [{"proc": f"p.{r}", "procs": "p", "rank": r, "pid": 500 + r, "state": "running"}
             for r in range(len(mesh["actors"]))]
    return Snapshot({"job_id": "j"}, {"hosts": [{"id": "h", "hostname": "box", "procs": procs}],
                                      "meshes": [mesh], "failures": []})


def test_the_last_dimension_runs_across_and_the_others_down() -> None:
    assert grid.layout(["dp", "tp"], [2, 4], 80) == [("dp=0", [0, 1, 2, 3]),
                                                     ("dp=1", [4, 5, 6, 7])]
    assert grid.layout(["a", "b", "c"], [2, 1, 2], 80) == [
        ("a=0 b=0", [0, 1]), ("a=1 b=0", [2, 3])]


def test_a_row_wider_than_the_screen_wraps_and_says_which_part() -> None:
    assert grid.layout(["gpus"], [10], 4) == [("gpus=0-3", [0, 1, 2, 3]),
                                              ("gpus=4-7", [4, 5, 6, 7]), ("gpus=8-9", [8, 9])]
    assert grid.layout(["hosts", "gpus"], [2, 3], 2)[:2] == [("hosts=0 gpus=0-1", [0, 1]),
                                                             ("hosts=0 gpus=2", [2])]
    assert grid.layout(["gpus"], [3], 10) == [("gpus=0-2", [0, 1, 2])]


@pytest.mark.parametrize("measure, values, top", [
    ("state", [None] * 8, None),
    ("queue", [0, 1, 2, 0, 1, 2, 0, 1], 2),
    ("handler", [0, 0, 0, 0, 0, 3.5, 0, 0], 3.5),
])
def test_each_cell_carries_the_measure_of_its_rank(measure: str, values: list[Any],
                                                   top: Any) -> None:
    shown = grid.build(snapshot(mesh_2d()), "m", measure, 80)
    assert shown is not None
    assert [c.rank for c in shown.cells] == list(range(8))
    assert [c.value for c in shown.cells] == values
    assert shown.top == top
    assert shown.at(1, 1).running == "step" and shown.at(1, 1).pid == 505  # type: ignore
    assert shown.position(6) == (1, 2) and shown.at(2, 0) is None


def test_rates_and_metrics_come_from_outside_and_laggards_are_marked() -> None:
    rates = {f"actor:m:{r}": float(r) for r in range(8)}
    by_rate = grid.build(snapshot(mesh_2d()), "m", "rate", 80, rates=rates)
    assert by_rate is not None and [c.value for c in by_rate.cells] == list(range(8))
    assert not any(c.lagging for c in by_rate.cells)  # only a metric has laggards
    steps = {r: 100.0 for r in range(8)} | {3: 80.0, 6: 99.0}
    by_metric = grid.build(snapshot(mesh_2d()), "m", "metric", 80, metric=steps)
    assert by_metric is not None
    assert [c.rank for c in by_metric.cells if c.lagging] == [3]


def test_a_stalled_or_failed_rank_shows_its_state_and_a_gone_mesh_is_none() -> None:
    shown = grid.build(snapshot(mesh_2d({2: "stalled", 7: "failed"})), "m", "queue", 80)
    assert shown is not None
    assert [c.rank for c in shown.cells if c.stalled] == [2]
    assert shown.cells[7].state == "failed"
    assert grid.build(snapshot(mesh_2d()), "gone", "state", 80) is None
    with pytest.raises(ValueError, match="unknown measure 'heat'"):
        grid.build(snapshot(mesh_2d()), "m", "heat", 80)


def test_lagging_needs_more_than_a_step_or_two_and_a_tenth() -> None:
    assert grid.lagging({0: 10.0, 1: 8.0, 2: 7.0}) == {2}
    assert grid.lagging({0: 1000.0, 1: 950.0, 2: 899.0}) == {2}
    assert grid.lagging({0: 5.0, 1: None}) == set()
    assert grid.lagging({}) == set()


def test_metric_names_are_the_mesh_ranks_own_and_values_go_to_their_rank() -> None:
    points = [{"name": "messages_handled", "type": "counter", "source": "p.0", "value": 3},
              {"name": "step", "type": "gauge", "source": "p.1", "labels": {"rank": "1"},
               "value": 7},
              {"name": "loss", "type": "gauge", "source": "p.2", "labels": {}, "value": 0.5},
              {"name": "loss", "type": "gauge", "source": "p.2", "labels": {"x": "y"},
               "value": 0.25},
              {"name": "lat", "type": "histogram", "source": "p.2", "value": 0}]
    assert grid.metric_names(points, mesh_2d()) == ["loss", "step"]
    controller = [{"name": "stalled_handlers", "type": "gauge", "source": "controller",
                   "value": 0}]
    assert grid.metric_names(points + controller, mesh_2d()) == ["loss", "step"]
    assert grid.metric_by_rank(points, "step", mesh_2d()) == {1: 7.0}
    assert grid.metric_by_rank(points, "loss", mesh_2d()) == {2: 0.75}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
    lambda sizes: st.tuples(st.just(sizes), st.sets(st.integers(0, _total(sizes) - 1),
                                                    min_size=1))))
def test_the_selection_of_any_set_of_cells_selects_exactly_those(case: Any) -> None:
    sizes, ranks = case
    labels = ["a", "b", "c"][:len(sizes)]
    text = grid.selection_of(ranks, labels, sizes)
    assert select_ranks(text, labels, sizes) == sorted(ranks)


def test_selection_texts_read_as_a_person_would_write_them() -> None:
    labels, sizes = ["dp", "tp"], [2, 4]
    assert grid.selection_of(range(8), labels, sizes) == ""
    assert grid.selection_of([4, 5, 6, 7], labels, sizes) == "dp=1"
    assert grid.selection_of([1, 2, 7], labels, sizes) == "dp=0, tp=1:3; dp=1, tp=3"
    assert grid.selection_of([0, 2], labels, sizes) == "dp=0, tp=(0,2)"


def test_a_union_selection_fits_every_part_or_fails() -> None:
    assert select_ranks("gpus=0; gpus=3", ["gpus"], [4]) == [0, 3]
    with pytest.raises(SelectionError, match="out of range"):
        select_ranks("gpus=0; gpus=9", ["gpus"], [4])
    with pytest.raises(SelectionError, match="selects no rank"):
        select_ranks(" ; ", ["gpus"], [4])


def _total(sizes: list[int]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total
