"""The log pane's pure model: which records pass a filter, folded across ranks or not.

Records are the admin API's dicts; folding is `monarch.telemetry.fold` (identical lines of one
second, Monarch's `[N similar log lines] [ranks 0-7] text`).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from monarch import telemetry

from ._filter import TextFilter
from ._model import Index, Row, Snapshot


@dataclasses.dataclass(frozen=True, slots=True)
class LogFilter:
    """Which log records the log pane shows: the `/` filter (a regular expression, `!`
    inverts: `_filter.TextFilter`), mesh name, rank, proc."""

    text: str = ""
    mesh: str | None = None
    rank: int | None = None
    proc: str | None = None

    def matches(self, record: Mapping[str, Any]) -> bool:
        if self.mesh is not None and record.get("mesh") != self.mesh:
            return False
        if self.rank is not None and record.get("rank") != self.rank:
            return False
        if self.proc is not None and record.get("proc") != self.proc:
            return False
        return TextFilter(self.text).matches(str(record.get("text", "")))

    def describe(self) -> str:
        """`mesh=trainers rank=2 /loss` (empty when it shows everything)."""
        parts = [f"{k}={v}" for k, v in (("mesh", self.mesh), ("rank", self.rank),
                                         ("proc", self.proc)) if v is not None]
        return " ".join(parts + ([f"/{self.text}"] if self.text else []))


def filter_for(row: Row | None, snapshot: Snapshot, text: str = "") -> LogFilter:
    """The log filter following a tree row: its actor mesh (and rank), or its proc mesh's procs."""
    if row is None or row.kind in ("job", "host"):
        return LogFilter(text)
    index = Index(snapshot)
    if row.kind == "actor":
        mesh, actor = index.actors[row.ref]
        return LogFilter(text, mesh["name"], actor["rank"])
    if row.kind == "mesh":
        return LogFilter(text, index.meshes[row.ref]["name"])
    return LogFilter(text)


@dataclasses.dataclass(frozen=True, slots=True)
class LogLine:
    """One line of the log pane: maybe several identical records folded together."""

    time: float
    stream: str
    level: int
    source: str
    text: str
    count: int = 1

    def __str__(self) -> str:
        fold = f"[{self.count} similar log lines] " if self.count > 1 else ""
        return f"{fold}[{self.source}] {self.text}" if self.source else f"{fold}{self.text}"


class LogBuffer:
    """The newest log records (bounded), and the pane's lines under a filter, folded or not.

    Each record is kept as the `telemetry.LogRecord` that `fold` takes, its `tags` being the
    admin API's dict (converted once, on arrival).
    """

    def __init__(self, limit: int = 5000) -> None:
        self._records: deque[telemetry.LogRecord] = deque(maxlen=limit)
        self.version = 0
        """Bumped by every change: the pane re-renders when it moved."""
        self.received = 0

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records held, oldest first (the admin API's dicts)."""
        return [r.tags for r in self._records]  # type: ignore[misc]

    def extend(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Adds records (any order; kept in HLC order); returns how many were new."""
        fresh = [_log_record(dict(r)) for r in records]
        if not fresh:
            return 0
        late = self._records and fresh[0].hlc < self._records[-1].hlc
        self._records.extend(fresh)
        if late or any(a.hlc > b.hlc for a, b in zip(fresh, fresh[1:])):
            ordered = sorted(self._records, key=lambda r: r.hlc)
            self._records.clear()
            self._records.extend(ordered)
        self.received += len(fresh)
        self.version += 1
        return len(fresh)

    def lines(self, flt: LogFilter = LogFilter(), fold: bool = True,
              limit: int = 500) -> list[LogLine]:
        """The last `limit` lines that pass `flt`, identical lines of one second folded."""
        chosen = [r for r in self._records if flt.matches(r.tags)]
        if not fold:
            return [_line([r.tags]) for r in chosen[-limit:]]
        folded = telemetry.fold(chosen[-limit * 4:], window=1.0)
        return [_line([m.tags for m in f.members]) for f in folded][-limit:]


def _log_record(record: Mapping[str, Any]) -> telemetry.LogRecord:
    return telemetry.LogRecord(int(record.get("hlc") or 0), int((record.get("time") or 0) * 1e9),
                               str(record.get("stream", "stdout")),
                               int(record.get("level") or 20), str(record.get("text", "")),
                               tags=record)  # type: ignore[arg-type]


def _line(members: list[Mapping[str, Any]]) -> LogLine:
    first = members[0]
    return LogLine(float(first.get("time") or 0.0), str(first.get("stream", "stdout")),
                   int(first.get("level") or 20), log_source(members),
                   str(first.get("text", "")), len(members))


log_source = telemetry.source_label
"""Who wrote a (folded) line: one label with `monarch logs --fold`."""
