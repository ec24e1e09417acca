"""Plain-text grids: `ProcMesh.to_table()` and `monarch.show` (no extra dependency)."""

from __future__ import annotations

from typing import Any, Sequence

import torch


def grid(cells: Sequence[str], labels: Sequence[str], sizes: Sequence[int],
         title: str = "") -> str:
    """`cells` (row-major over `sizes`) as a grid: the last dimension across, the one before
    down, any earlier ones as separate grids headed by their coordinates."""
    labels, sizes = list(labels), list(sizes)
    if not sizes:
        return "\n".join(filter(None, [title, cells[0] if cells else ""]))
    if len(sizes) == 1:
        labels, sizes = ["", *labels], [1, *sizes]
    rows, cols = sizes[-2], sizes[-1]
    per = rows * cols
    out = [title] if title else []
    outer = sizes[:-2]
    for block in range(len(cells) // per):
        if outer:
            coords, rest = [], block
            for size in reversed(outer):
                rest, c = divmod(rest, size)
                coords.append(c)
            head = ", ".join(f"{n}={c}" for n, c in zip(labels, reversed(coords)))
            out.append(f"[{head}]")
        part = cells[block * per:(block + 1) * per]
        out.append(_one(part, labels[-2], labels[-1], rows, cols))
    return "\n".join(out)


def _one(cells: Sequence[str], row_label: str, col_label: str, rows: int, cols: int) -> str:
    row_names = [f"{row_label}={r}" if row_label else "" for r in range(rows)]
    header = [f"{col_label}={c}" for c in range(cols)]
    width = [max([len(header[c])] + [len(cells[r * cols + c]) for r in range(rows)])
             for c in range(cols)]
    left = max(len(n) for n in row_names)
    lines = [" " * left + " | " + " | ".join(h.rjust(w) for h, w in zip(header, width))]
    lines.append("-" * left + "-+-" + "-+-".join("-" * w for w in width))
    for r in range(rows):
        row = " | ".join(cells[r * cols + c].rjust(width[c]) for c in range(cols))
        lines.append(row_names[r].rjust(left) + " | " + row)
    return "\n".join(lines)


def render(value: Any) -> str:
    """Fetched values as text: tensors of 1 to 3 dimensions as grids, the rest with repr."""
    if isinstance(value, torch.Tensor) and 1 <= value.dim() <= 3 and value.numel() <= 4096:
        cells = [_number(v) for v in value.flatten().tolist()]
        names = ["d0", "d1", "d2"][-value.dim():] if value.dim() < 3 else ["d0", "d1", "d2"]
        return grid(cells, names, list(value.shape),
                    title=f"tensor {tuple(value.shape)} {value.dtype}")
    if isinstance(value, (list, tuple)):
        return "\n".join(render(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}:\n{render(v)}" for k, v in value.items())
    return repr(value)


def _number(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)
