"""The geometry of meshes: View, a named n-d strided slice of base ranks (an "ndslice").

A View says which base ranks (of a proc mesh, or of a ValueMesh's values) a mesh covers:
`rank = offset + sum(coord[i] * strides[i])`, enumerated in row-major order of the coordinates.
Slicing, flattening, renaming and splitting make new views, with Monarch's error texts.

Invariant of every view made through this API (dense views and what `slice`, `flatten`,
`rename`, `split` derive from them): strides are positive and nested, i.e. the ranks a dimension
spans stay below the stride of every dimension with a larger stride. `index_of` relies on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ._extent import DimensionNotFound, Extent, Point, check_label, product, unravel, unsigned
from ._split import split_dims

__all__ = ["DimensionNotFound", "Extent", "Point", "View"]


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """Base ranks arranged as a named, strided n-d array.

    Attributes:
        labels: dimension names.
        sizes: dimension sizes.
        strides: how far (in base ranks) one step along each dimension moves.
        offset: the base rank at coordinates all zero.
    """

    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def dense(labels: Sequence[str], sizes: Sequence[int], offset: int = 0) -> View:
        """A row-major view of `prod(sizes)` consecutive ranks starting at `offset`."""
        return View(tuple(labels), tuple(sizes), dense_strides(sizes), offset)

    # -- enumeration -----------------------------------------------------------------------
    def __len__(self) -> int:
        return product(self.sizes)

    @property
    def extent(self) -> Extent:
        """Labels and sizes."""
        return Extent._trusted(self.labels, self.sizes)

    def coords(self, index: int) -> tuple[int, ...]:
        """The coordinates of the `index`-th point (row-major)."""
        return unravel(index, self.sizes)

    def point(self, index: int) -> Point:
        """The `index`-th point, in this view's extent."""
        return Point(index, self.extent)

    def rank_at(self, index: int) -> int:
        """The base rank of the `index`-th point (row-major); IndexError if out of range."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for a view of {len(self)} ranks")
        rank = self.offset
        for coord, stride in zip(unravel(index, self.sizes), self.strides):
            rank += coord * stride
        return rank

    def ranks(self) -> list[int]:
        """Every base rank, in row-major order of the view."""
        out = [self.offset]
        for size, stride in zip(self.sizes, self.strides):
            out = [base + i * stride for base in out for i in range(size)]
        return out

    def index_of(self, rank: int) -> int:
        """The row-major index of base rank `rank`; ValueError if the view does not cover it."""
        rest = rank - self.offset
        coords = [0] * len(self.sizes)
        for dim in sorted(range(len(self.sizes)), key=lambda d: -self.strides[d]):
            if self.sizes[dim] > 1:
                coords[dim], rest = divmod(rest, self.strides[dim])
        if rest or any(not 0 <= c < s for c, s in zip(coords, self.sizes)):
            raise ValueError(f"rank {rank} is not in {self}")
        index = 0
        for coord, size in zip(coords, self.sizes):
            index = index * size + coord
        return index

    def rank_of(self, coords: dict[str, Any]) -> int:
        """The base rank at `coords` (every dimension named), as Monarch's `item()` checks them:
        KeyError for a missing or extra label, IndexError when out of range."""
        extra = [label for label in coords if label not in self.labels]
        if extra:
            raise KeyError(f"item has extra dimensions: {extra}")
        rank, inside = self.offset, True
        for label, size, stride in zip(self.labels, self.sizes, self.strides):
            if label not in coords:
                raise KeyError(label)
            coord = unsigned(coords[label], "coordinates")
            inside = inside and coord < size
            rank += coord * stride
        if not inside:
            raise IndexError(f"rank {rank} not in current shape")
        return rank

    def size(self, dims: str | Sequence[str] | None = None, *, owner: object = None) -> int:
        """The number of points, or the product of the sizes of `dims` (one label or several).

        A label that is not a dimension is a KeyError naming `owner` (default: this view),
        as Monarch's meshes word it: `<owner repr> does not have dimension 'x'`.
        """
        if dims is None:
            return len(self)
        total = 1
        for label in [dims] if isinstance(dims, str) else dims:
            if label not in self.labels:
                who = self if owner is None else owner
                raise KeyError(f"{who!r} does not have dimension {label!r}")
            total *= self.sizes[self.labels.index(label)]
        return total

    # -- geometry --------------------------------------------------------------------------
    def slice(self, **selection: Any) -> View:
        """Selects along dimensions: an int drops the dimension, a slice keeps it (step > 0).

        Errors, as Monarch's: a label that is not a dimension is a TypeError, an index out of
        range an IndexError, an empty or out-of-range slice a ValueError.
        """
        labels, sizes = list(self.labels), list(self.sizes)
        strides, offset = list(self.strides), self.offset
        for label, sel in selection.items():
            if label not in labels:
                raise TypeError(f"Shape does not have dimension labeled {label!r}")
            dim = labels.index(label)
            if isinstance(sel, slice):
                start, count, step = _select_range(label, sizes[dim], sel)
                offset += start * strides[dim]
                sizes[dim], strides[dim] = count, strides[dim] * step
            else:
                offset += _select_index(label, sizes[dim], sel) * strides[dim]
                del labels[dim], sizes[dim], strides[dim]
        return View(tuple(labels), tuple(sizes), tuple(strides), offset)

    def flatten(self, name: str) -> View:
        """The same ranks along one dimension `name`; ValueError unless they are contiguous."""
        dense = dense_strides(self.sizes)
        # Unlike Monarch, a size-1 dimension's stride does not matter: it is never stepped.
        if any(s != d for s, d, n in zip(self.strides, dense, self.sizes) if n != 1):
            raise ValueError(f"cannot flatten sparse mesh: ndslice.strides={list(self.strides)}"
                             f" != dense_strides={list(dense)}")
        return View((check_label(name),), (len(self),), (1,), self.offset)

    def rename(self, **names: str) -> View:
        """Renames dimensions (`old=new`); the new labels must stay distinct."""
        return self.split(**{old: (new,) for old, new in names.items()})

    def split(self, **kwargs: Any) -> View:
        """Splits dimensions: `split(host=("dp", "pp"), gpu=("tp", "cp"), pp=16, cp=2)`.

        Each existing label maps to the names of the dimensions it becomes (outer first); every
        other keyword is the integer size of a new dimension. All sizes but one per split
        dimension must be given; the last is derived. Texts of the errors are Monarch's.
        """
        labels, sizes, strides = split_dims(self.labels, self.sizes, self.strides, kwargs)
        return View(labels, sizes, strides, self.offset)

    # -- casting ---------------------------------------------------------------------------
    def chunks(self, lo: int, hi: int, fanout: int) -> list[tuple[int, int]]:
        """The children of a cast-tree hop covering indices `[lo, hi)` of this view.

        The hop's receiver handles index `lo` itself; the rest, `(lo, hi)`, is split into at
        most `fanout` contiguous ranges whose lengths differ by at most one, in order. Each
        child handles the first index of its range and recurses, so every index is reached
        exactly once and the tree is about log_fanout(hi - lo) deep.
        """
        count = hi - lo - 1
        if count <= 0:
            return []
        parts = min(fanout, count)
        base, extra = divmod(count, parts)
        out = []
        start = lo + 1
        for i in range(parts):
            end = start + base + (1 if i < extra else 0)
            out.append((start, end))
            start = end
        return out

    # -- wire ------------------------------------------------------------------------------
    def to_wire(self) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...], int]:
        """A msgpack-friendly form: `(labels, sizes, strides, offset)`."""
        return (self.labels, self.sizes, self.strides, self.offset)

    @staticmethod
    def from_wire(wire: Sequence[Any]) -> View:
        """The inverse of `to_wire` (lists are accepted where tuples were sent)."""
        labels, sizes, strides, offset = wire
        return View(tuple(labels), tuple(sizes), tuple(strides), offset)


def dense_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides for `sizes`."""
    strides = []
    stride = 1
    for size in reversed(sizes):
        strides.append(stride)
        stride *= size
    return tuple(reversed(strides))


def _select_index(label: str, size: int, sel: Any) -> int:
    # Compare first, as Monarch does: a str or list fails the comparison with a TypeError.
    if sel < 0 or sel >= size:
        raise IndexError(f"index out of range: {label}={sel}, and {label} has size {size} "
                         f"(0 to {size - 1})")
    return unsigned(sel, "index")


def _select_range(label: str, size: int, sel: slice) -> tuple[int, int, int]:
    start, stop, step = sel.indices(size)
    if step < 0:
        raise ValueError("nonrectangular shape")
    if start >= size:
        raise ValueError(f"out of range {start}:{stop}:{step} for dimension {label} of size {size}")
    if stop <= start:
        raise ValueError(f"empty range {start}:{stop}:{step}")
    return start, len(range(start, stop, step)), step
