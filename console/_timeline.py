"""The span timeline's model: the last seconds of a mesh as bars on a time axis, one lane per
rank, to see who waits for whom.

Pure: `build` lays the spans the admin API returned (`AdminClient.spans`) and the handlers
running now (the topology's `running`, which have no span yet) into `width` buckets per lane;
a bucket shows the innermost span covering it. `_timeline_view` draws it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WINDOWS_S = (5.0, 10.0, 30.0, 60.0, 120.0)
"""The time windows `+` and `-` step through."""


@dataclasses.dataclass(frozen=True, slots=True)
class Lane:
    """One rank's row: the span name of each bucket (None: idle), and what runs now."""

    rank: int
    label: str
    cells: tuple[str | None, ...]
    running: str = ""
    """The handler running now (its bar reaches `now`), "" when idle."""


@dataclasses.dataclass(frozen=True, slots=True)
class Timeline:
    start_ns: int
    end_ns: int
    lanes: tuple[Lane, ...]
    names: tuple[tuple[str, float], ...]
    """Span names by the time they took in the window (seconds, summed over lanes), most
    first: the legend, and the order colours are given in."""


def build(spans: Iterable[Mapping[str, Any]], ranks: Sequence[int], now_ns: int,
          window_s: float, width: int, labels: Mapping[int, str] | None = None,
          running: Mapping[int, tuple[str, float]] | None = None) -> Timeline:
    """The timeline of `ranks` over the `window_s` seconds before `now_ns`.

    Args:
        spans: span dicts with `rank`, `name`, `start_ns`, `end_ns`.
        ranks: the lanes, top to bottom.
        now_ns: the right edge (epoch ns).
        window_s: seconds shown.
        width: buckets per lane.
        labels: a lane's label by rank (default `rank N`).
        running: (method, since in epoch seconds) of each rank's handler running now.
    """
    width = max(width, 1)
    start = now_ns - int(window_s * 1e9)
    per = (now_ns - start) / width
    lanes: dict[int, list[str | None]] = {r: [None] * width for r in ranks}
    busy: dict[str, float] = {}
    bars = [(int(s["rank"]), str(s.get("name", "?")), int(s.get("start_ns") or 0),
             int(s.get("end_ns") or 0)) for s in spans
            if s.get("rank") in lanes and (s.get("end_ns") or 0) > start]
    for rank, (method, since) in (running or {}).items():
        if rank in lanes:
            bars.append((rank, method, int(since * 1e9), now_ns))
    for rank, name, begin, end in sorted(bars, key=lambda b: b[2] - b[3]):  # longest first:
        begin, end = max(begin, start), min(end, now_ns)                   # inner ones win
        if end <= begin:
            continue
        busy[name] = busy.get(name, 0.0) + (end - begin) / 1e9
        first = min(int((begin - start) / per), width - 1)
        last = min(max(int((end - start - 1) / per), first), width - 1)
        for i in range(first, last + 1):
            lanes[rank][i] = name
    names = tuple(sorted(busy.items(), key=lambda kv: -kv[1]))
    return Timeline(start, now_ns, tuple(
        Lane(r, (labels or {}).get(r, f"rank {r}"), tuple(lanes[r]),
             (running or {}).get(r, ("", 0.0))[0]) for r in ranks), names)


def axis(width: int, window_s: float) -> str:
    """`-10s      -5s      now` under the lanes: the left edge, the middle and the right."""
    left, middle = f"-{window_s:g}s", f"-{window_s / 2:g}s"
    line = [" "] * width
    for at, text in ((0, left), (width // 2 - len(middle) // 2, middle),
                     (width - 3, "now")):
        for i, ch in enumerate(text):
            if 0 <= at + i < width:
                line[at + i] = ch
    return "".join(line)


def busy_share(lane: Lane) -> float:
    """The share of the window a lane spent in spans (0..1)."""
    return sum(c is not None for c in lane.cells) / len(lane.cells) if lane.cells else 0.0
