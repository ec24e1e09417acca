"""Numbers as the console prints them: bytes, rates, durations, ages and sparklines (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_BLOCKS = " ▁▂▃▄▅▆▇█"


def fmt_bytes(n: float | None) -> str:
    """`1.5 MiB`."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def fmt_rate(n: float | None) -> str:
    """`12.3/s`, `-` when unknown."""
    if n is None:
        return "-"
    return f"{n:.0f}/s" if n >= 100 else f"{n:.1f}/s"


def fmt_ms(ms: float | None) -> str:
    """`0.42ms`, `12ms`, `1.2s`."""
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms / 1000:.1f}s"
    return f"{ms:.0f}ms" if ms >= 10 else f"{ms:.2f}ms"


def fmt_duration(seconds: float | None) -> str:
    """`3h02m`, `4m05s`, `12s`."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def sparkline(values: Sequence[float], width: int = 30) -> str:
    """The last `width` values as block characters, scaled to their maximum."""
    tail = list(values)[-width:]
    top = max(tail, default=0.0)
    if top <= 0:
        return _BLOCKS[1] * len(tail)
    return "".join(_BLOCKS[max(1, round(v / top * (len(_BLOCKS) - 1)))] if v > 0 else _BLOCKS[1]
                   for v in tail)


# -- grouped stacks (`S` in the console, `monarch stack MESH --group`) ----------------------------

def ranks_text(ranks: Sequence[int]) -> str:
    """`rank 2`, `ranks 0-1,3`."""
    from monarch.telemetry import compress_ranks

    return f"rank{'s' if len(ranks) != 1 else ''} {compress_ranks(ranks)}"


def stacks_headline(result: Mapping[str, Any]) -> str:
    """`waiters (mesh id): 4 ranks, 2 distinct stacks` (an `AdminClient.stacks` answer)."""
    groups = result.get("groups", [])
    ranks = sum(len(g["ranks"]) for g in groups)
    return (f"{result.get('name')} ({result.get('mesh')}): {ranks} ranks, {len(groups)} "
            f"distinct stack{'s' if len(groups) != 1 else ''}")


def stack_group_text(group: Mapping[str, Any]) -> str:
    """`rank 2: hold_the_line ← work  [running work]`."""
    running = group.get("running")
    return f"{ranks_text(group['ranks'])}: {group['summary']}" + (
        f"  [running {', '.join(running)}]" if running else "")


def frame_text(frame: Sequence[Any]) -> str:
    """`file:line in function`."""
    file, line, function = frame
    return f"{file}:{line} in {function}"
