"""Folding repeated log lines across ranks, as Monarch's log aggregation prints them.

``[8 similar log lines] [ranks 0-7] loss=0.25``: identical lines (same stream and text) written in
the same time window fold into one item that keeps its members, so a viewer can unfold it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._hlc import hlc_wall_ns
from ._records import LogRecord


def compress_ranks(ranks: Iterable[Any]) -> str:
    """Writes ranks compactly: ``[0, 1, 2, 3, 6]`` → ``"0-3,6"``; non-int ranks are listed."""
    unique = set(ranks)
    ints = sorted(r for r in unique if isinstance(r, int) and not isinstance(r, bool))
    parts = [_range_text(lo, hi) for lo, hi in _runs(ints)]
    parts += sorted(str(r) for r in unique if r not in ints)
    return ",".join(parts)


def _runs(ints: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for value in ints:
        if runs and value == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


def _range_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


@dataclasses.dataclass(frozen=True, slots=True)
class FoldedLine:
    """One or more identical log lines from one time window.

    Attributes:
        text: the common text.
        stream: the common stream.
        members: the folded records, in input order.
    """

    text: str
    stream: str
    members: tuple[LogRecord, ...]

    @property
    def count(self) -> int:
        """How many lines were folded."""
        return len(self.members)

    @property
    def ranks(self) -> list[Any]:
        """The distinct ranks of the members (ints sorted first)."""
        ranks = {m.rank for m in self.members if m.rank is not None}
        ints = sorted(r for r in ranks if isinstance(r, int))
        return [*ints, *sorted((r for r in ranks if not isinstance(r, int)), key=str)]

    @property
    def hlc(self) -> int:
        """The first member's stamp: where the folded line sorts."""
        return self.members[0].hlc

    @property
    def source(self) -> str:
        """Who wrote it: `trainers[0-3]`, `trainers[1]`, a proc's name, or `2 meshes [ranks
        0-1]` (see `source_label`)."""
        return source_label([m.tags for m in self.members])

    def unfold(self) -> list[LogRecord]:
        """Returns the members, one record per original line."""
        return list(self.members)

    def __str__(self) -> str:
        ranks = compress_ranks(self.ranks)
        if self.count == 1:
            return f"[{ranks}] {self.text}" if ranks else self.text
        prefix = f"[{self.count} similar log lines]"
        return f"{prefix} [ranks {ranks}] {self.text}" if ranks else f"{prefix} {self.text}"


def source_label(tags: Sequence[Mapping[str, Any]]) -> str:
    """The one label of the writers of some lines (their tags): `trainers[0-3]`,
    `trainers[1]`, `ctl` (a line of no actor: its proc), or `2 meshes [ranks 0-1]`. The
    console and `monarch logs` both write it."""
    meshes = list(dict.fromkeys(str(t.get("mesh") or t.get("proc") or "") for t in tags))
    ranks = [t.get("rank") for t in tags if t.get("rank") is not None]
    if len(meshes) == 1:
        return f"{meshes[0]}[{compress_ranks(ranks)}]" if ranks else meshes[0]
    return f"{len(meshes)} meshes [ranks {compress_ranks(ranks)}]"


def fold(records: Iterable[LogRecord], window: float | None = 1.0) -> list[FoldedLine]:
    """Folds identical lines (same stream and text) written within the same window.

    Args:
        records: log records in display order (e.g. `Store.logs` output, HLC order).
        window: window length in seconds; windows are aligned on multiples of it (by the
            records' HLC wall time). None folds over all of ``records``.

    Returns:
        One item per distinct (window, stream, text), ordered by its first member.
    """
    window_ns = None if window is None else max(1, int(window * 1e9))
    groups: dict[tuple[int, str, str], list[LogRecord]] = {}
    for record in records:
        bucket = 0 if window_ns is None else hlc_wall_ns(record.hlc) // window_ns
        groups.setdefault((bucket, record.stream, record.text), []).append(record)
    return [FoldedLine(text, stream, tuple(members))
            for (_, stream, text), members in groups.items()]
