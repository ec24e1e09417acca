"""Rank selections written as text: `gpus=0:2`, `hosts=0, gpus=0:4`, `gpus=(1,3)`, or `` (all);
a union of such with `;` (`hosts=0, gpus=1; hosts=3, gpus=(2,5)`: the console's grid writes
the cells it selects so).

Pure logic shared by the admin API (kill/stop a slice), the CLI and the console. Each item is
`label=value` with value an index `N`, a range `start:stop[:step]` (either end may be left out)
or a list `(a,b,...)`; labels not named keep their whole range. The result is the selected
points' row-major ranks in the extent, ascending.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


class SelectionError(ValueError):
    """A selection that does not parse or does not fit the extent; the message says why."""


def select_ranks(selection: str, labels: Sequence[str], sizes: Sequence[int]) -> list[int]:
    """The ranks of the extent (`labels`, `sizes`) that `selection` picks.

    Raises:
        SelectionError: unknown label, index out of range, bad syntax, or no rank selected.
    """
    if ";" in selection:  # a union: each part on its own, every part must fit
        parts = [p for p in selection.split(";") if p.strip()]
        if not parts:
            raise SelectionError(f"{selection!r} selects no rank")
        return sorted({r for part in parts for r in select_ranks(part, labels, sizes)})
    chosen = [list(range(size)) for size in sizes]
    for label, text in parse_selection(selection):
        if label not in labels:
            known = ", ".join(labels) or "none (a mesh of one)"
            raise SelectionError(f"unknown dimension {label!r}; this mesh has: {known}")
        dim = list(labels).index(label)
        chosen[dim] = _values(label, text, sizes[dim])
    ranks = [_rank(point, sizes) for point in itertools.product(*chosen)]
    if not ranks:
        raise SelectionError(f"{selection!r} selects no rank")
    return sorted(set(ranks))


def parse_selection(selection: str) -> list[tuple[str, str]]:
    """Splits a selection into (label, value text) items; `""` and `"*"` give none (all)."""
    text = selection.strip()
    if text in ("", "*", "all"):
        return []
    if text.count("(") != text.count(")"):
        raise SelectionError(f"{selection.strip()!r}: unbalanced parentheses")
    items: list[tuple[str, str]] = []
    for part in [p.strip() for p in split_top(text) if p.strip()]:
        label, sep, value = part.partition("=")
        label, value = label.strip(), value.strip()
        if not sep or not label or not value:
            raise SelectionError(f"expected label=value, got {part!r} (e.g. 'gpus=0:2')")
        if any(label == seen for seen, _ in items):
            raise SelectionError(f"{label} is given twice in {selection.strip()!r}: say it once "
                                 f"(a list is {label}=(a,b))")
        items.append((label, value))
    return items


def split_top(text: str) -> list[str]:
    """`text` split at the commas outside parentheses, every part as it is (an empty one
    included: callers say whether it is an error)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _values(label: str, text: str, size: int) -> list[int]:
    try:
        if text.startswith("("):
            inner = text[1:-1] if text.endswith(")") else ""
            values = [int(v) for v in inner.split(",")] if inner.strip() else []
            if not values:
                raise ValueError(text)
        elif ":" in text:
            return _range(label, text, size)
        else:
            values = [int(text)]
    except SelectionError:
        raise
    except ValueError:
        raise SelectionError(f"{label}={text}: not an index, range or list") from None
    for value in values:
        if not 0 <= value < size:
            raise SelectionError(f"{label}={value} is out of range (size {size})")
    return values


def _range(label: str, text: str, size: int) -> list[int]:
    bits = [b.strip() for b in text.split(":")]
    if len(bits) > 3:
        raise ValueError(text)
    start = int(bits[0]) if bits[0] else 0
    stop = int(bits[1]) if bits[1] else size
    step = int(bits[2]) if len(bits) == 3 and bits[2] else 1
    if step <= 0:
        raise SelectionError(f"{label}={text}: the step must be positive")
    if not (0 <= start <= size and 0 <= stop <= size):
        raise SelectionError(f"{label}={text} is out of range (size {size})")
    return list(range(start, stop, step))


def _rank(point: tuple[int, ...], sizes: Sequence[int]) -> int:
    rank = 0
    for coord, size in zip(point, sizes):
        rank = rank * size + coord
    return rank
