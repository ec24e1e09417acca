"""The grid's model: one actor mesh laid out by its dimensions, one cell per rank.

Pure logic for `_grid_view`: where each rank sits (the last dimension across, every point of
the others down; a one-dimensional mesh wraps), the value of the chosen measure in each cell,
which ranks lag behind the mesh's maximum, and the selection text that names a set of cells
(what kill, stop and stacks send to the admin API).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._model import STALLED, Index, Snapshot, actor_key, rank_procs

MEASURES = ("state", "queue", "handler", "rate", "metric")
"""What a cell can show: its state; its queue depth; seconds in the handler running now;
messages handled per second; a metric of the job (a user gauge or counter such as `step`)."""
UNITS = {"queue": "msgs", "handler": "s", "rate": "msg/s", "metric": ""}
LAG_FRACTION = 0.1
"""A rank lags when its metric is behind the mesh's maximum by more than this fraction of it
(and by more than 2: ranks a step or two apart are in step; a metric reaches the controller
up to a sampling period late)."""
BUILTIN_METRICS = frozenset({"messages_handled", "handler_latency_seconds", "queue_depth",
                             "message_bytes", "failures", "messages_sent", "weight_version",
                             "weight_bytes", "weight_reads"})
"""The runtime's own metrics: not offered as the grid's user metric."""


@dataclasses.dataclass(frozen=True, slots=True)
class Cell:
    """One rank: its point, state, the measure's value, and its marks."""

    rank: int
    point: Mapping[str, int]
    state: str
    value: float | None
    proc: str = ""
    pid: Any = None
    running: str = ""
    lagging: bool = False

    @property
    def stalled(self) -> bool:
        return self.state == STALLED


@dataclasses.dataclass(frozen=True, slots=True)
class Grid:
    """A mesh as rows of cells (`None` pads a short last row)."""

    mesh: str
    name: str
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    measure: str
    rows: tuple[tuple[str, tuple[Cell | None, ...]], ...]
    top: float | None
    """The largest value of the measure (None for state, or when no rank has one)."""

    @property
    def cells(self) -> list[Cell]:
        return [c for _, row in self.rows for c in row if c is not None]

    def at(self, row: int, col: int) -> Cell | None:
        """The cell at (row, col), None outside the grid or on padding."""
        if 0 <= row < len(self.rows) and 0 <= col < len(self.rows[row][1]):
            return self.rows[row][1][col]
        return None

    def position(self, rank: int) -> tuple[int, int] | None:
        """(row, col) of a rank."""
        for r, (_, cells) in enumerate(self.rows):
            for c, cell in enumerate(cells):
                if cell is not None and cell.rank == rank:
                    return r, c
        return None


def mesh_extent(mesh: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(labels, sizes) of an actor mesh dict (one `rank` dimension when it has none)."""
    extent = mesh.get("extent") or {}
    labels, sizes = tuple(extent.get("labels") or ()), tuple(extent.get("sizes") or ())
    if not labels:
        return ("rank",), (max(rank_procs(mesh), default=-1) + 1,)
    return labels, sizes


def layout(labels: Sequence[str], sizes: Sequence[int],
           width: int) -> list[tuple[str, list[int]]]:
    """The grid's rows as (label, ranks): the last dimension across, wrapped to `width` cells;
    one row per point of the leading dimensions (`hosts=3`, `dp=1 pp=0`)."""
    width = max(width, 1)
    across = sizes[-1] if sizes else 1
    lead = [range(s) for s in sizes[:-1]]
    rows: list[tuple[str, list[int]]] = []
    for index, point in enumerate(itertools.product(*lead)):
        name = " ".join(f"{label}={v}" for label, v in zip(labels, point))
        base = index * across
        for start in range(0, across, width):
            stop = min(start + width, across)
            span = "" if across <= width else f"{labels[-1]}={start}" if stop - start == 1 \
                else f"{labels[-1]}={start}-{stop - 1}"
            label = " ".join(x for x in (name, span) if x) or f"{labels[-1]}=0-{across - 1}"
            rows.append((label, list(range(base + start, base + stop))))
    return rows


def build(snapshot: Snapshot, mesh_id: str, measure: str, width: int,
          rates: Mapping[str, float] | None = None,
          metric: Mapping[int, float] | None = None) -> Grid | None:
    """The grid of one actor mesh (None when the snapshot no longer has it).

    Args:
        snapshot: the newest poll.
        mesh_id: the actor mesh.
        measure: one of `MEASURES`.
        width: cells that fit across.
        rates: messages/s by actor key (for `rate`).
        metric: the chosen metric's value by rank (for `metric`).
    """
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}; one of {', '.join(MEASURES)}")
    index = Index(snapshot)
    mesh = index.meshes.get(mesh_id)
    if mesh is None:
        return None
    labels, sizes = mesh_extent(mesh)
    actors = {a["rank"]: a for a in mesh.get("actors", [])}
    values = {rank: _value(measure, mesh_id, a, rates or {}, metric or {})
              for rank, a in actors.items()}
    known = [v for v in values.values() if v is not None]
    top = max(known) if known and measure != "state" else None
    behind = lagging(values) if measure == "metric" else set()
    rows = []
    for label, ranks in layout(labels, sizes, width):
        cells = tuple(_cell(index, mesh, actors[r], values[r], r in behind)
                      if r in actors else None for r in ranks)
        rows.append((label, cells))
    return Grid(mesh_id, str(mesh.get("name", mesh_id)), labels, sizes, measure,
                tuple(rows), top)


def _value(measure: str, mesh_id: str, actor: Mapping[str, Any], rates: Mapping[str, float],
           metric: Mapping[int, float]) -> float | None:
    if measure == "queue":
        return float(actor.get("queue_depth") or 0)
    if measure == "handler":
        running = actor.get("running") or []
        return float(running[0]["running_s"]) if running else 0.0
    if measure == "rate":
        return rates.get(actor_key(mesh_id, actor["rank"]))
    if measure == "metric":
        return metric.get(actor["rank"])
    return None


def _cell(index: Index, mesh: dict[str, Any], actor: dict[str, Any],
          value: float | None, behind: bool) -> Cell:
    proc = index.procs.get(actor.get("proc", ""), {})
    running = actor.get("running") or []
    return Cell(actor["rank"], dict(actor.get("point") or {}), index.actor_state(mesh, actor),
                value, str(actor.get("proc", "")), proc.get("pid"),
                running[0]["method"] if running else "", behind)


def lagging(values: Mapping[int, float | None]) -> set[int]:
    """The ranks whose value is behind the maximum by more than `LAG_FRACTION` of it (and 2)."""
    known = {r: v for r, v in values.items() if v is not None}
    if not known:
        return set()
    top = max(known.values())
    slack = max(2.0, abs(top) * LAG_FRACTION)
    return {r for r, v in known.items() if top - v > slack}


def metric_names(points: Iterable[Mapping[str, Any]], mesh: Mapping[str, Any]) -> list[str]:
    """The user metrics the ranks of `mesh` report, among the admin API's per-process metric
    points (`AdminClient.metrics(by_process=True)`), sorted."""
    procs = set(rank_procs(mesh).values())
    return sorted({str(p["name"]) for p in points if p.get("name") not in BUILTIN_METRICS
                   and p.get("type") in ("gauge", "counter", "updown")
                   and str(p.get("source")) in procs})


def metric_by_rank(points: Iterable[Mapping[str, Any]], name: str,
                   mesh: Mapping[str, Any]) -> dict[int, float]:
    """The metric `name` of each rank of `mesh`, from per-process points
    (`AdminClient.metrics(by_process=True)`): the series labelled with the rank when there is
    one, else the sum of the rank's process's series."""
    rank_of_proc: dict[str, list[int]] = {}
    for rank, proc in rank_procs(mesh).items():
        rank_of_proc.setdefault(proc, []).append(rank)
    labelled: dict[int, float] = {}
    summed: dict[int, float] = {}
    for p in points:
        if p.get("name") != name or p.get("type") not in ("gauge", "counter", "updown"):
            continue
        ranks = rank_of_proc.get(str(p.get("source")), [])
        labels = p.get("labels") or {}
        value = float(p.get("value") or 0)
        if "rank" in labels and str(labels["rank"]).isdigit() and int(labels["rank"]) in ranks:
            labelled[int(labels["rank"])] = value
        elif len(ranks) == 1:
            summed[ranks[0]] = summed.get(ranks[0], 0.0) + value
    return {**summed, **labelled}


def selection_of(ranks: Iterable[int], labels: Sequence[str], sizes: Sequence[int]) -> str:
    """The selection text naming exactly `ranks` (`""`: the whole mesh): one part per point of
    the leading dimensions, `; ` between parts (`hosts=0, gpus=(1,3); hosts=2, gpus=0:4`)."""
    chosen = sorted(set(ranks))
    total = 1
    for size in sizes:
        total *= size
    if len(chosen) == total:
        return ""
    across = sizes[-1] if sizes else 1
    by_lead: dict[int, list[int]] = {}
    for rank in chosen:
        by_lead.setdefault(rank // across, []).append(rank % across)
    parts = []
    for lead, cols in by_lead.items():
        point = []
        for label, size in reversed(list(zip(labels[:-1], sizes[:-1]))):
            lead, coord = divmod(lead, size)
            point.append(f"{label}={coord}")
        point.reverse()
        if len(cols) < across:
            point.append(f"{labels[-1]}={_values_text(cols)}")
        parts.append(", ".join(point))
    return "; ".join(parts)


def _values_text(values: list[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}:{values[-1] + 1}"
    return "(" + ",".join(map(str, values)) + ")"
