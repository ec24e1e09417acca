"""The geometry of meshes: Extent, Point, and View (a named n-d slice of base ranks).

A View says which base ranks (of a proc mesh, or of a ValueMesh's values) a mesh covers, as an
n-dimensional strided array with labels: `rank = offset + sum(coord[i] * strides[i])`. Slicing,
flattening, renaming and splitting make new views; the texts of their errors are Monarch's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Iterator, Sequence


class Extent:
    """Dimension labels and sizes; prints as `{hosts: 2, gpus: 4}`."""

    __slots__ = ("labels", "sizes")

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        if len(labels) != len(sizes):
            raise ValueError(f"{len(labels)} labels for {len(sizes)} sizes")
        self.labels: list[str] = list(labels)
        self.sizes: list[int] = list(sizes)

    @property
    def nelements(self) -> int:
        """The number of points."""
        return _product(self.sizes)

    def keys(self) -> list[str]:
        """The labels."""
        return list(self.labels)

    def __getitem__(self, label: str) -> int:
        try:
            return self.sizes[self.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __contains__(self, label: object) -> bool:
        return label in self.labels

    def __len__(self) -> int:
        return len(self.labels)

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Extent) and self.labels == other.labels
                and self.sizes == other.sizes)

    def __hash__(self) -> int:
        return hash((tuple(self.labels), tuple(self.sizes)))

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(self.labels, self.sizes)) + "}"

    def __reduce__(self) -> Any:
        return Extent, (self.labels, self.sizes)


class Point(Mapping[str, int]):
    """A point of an extent: its row-major `rank` and its coordinates by label.

    Prints as `{'hosts': 1/2, 'gpus': 3/4}`; `dict(point)` is `{'hosts': 1, 'gpus': 3}`.
    """

    __slots__ = ("rank", "extent", "_coords")

    def __init__(self, rank: int, extent: Extent) -> None:
        if not 0 <= rank < max(extent.nelements, 1):
            raise IndexError(f"rank {rank} out of range for extent {extent}")
        self.rank = rank
        self.extent = extent
        self._coords = _unravel(rank, extent.sizes)

    def __getitem__(self, label: str) -> int:
        try:
            return self._coords[self.extent.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.extent.labels)

    def __len__(self) -> int:
        return len(self.extent.labels)

    def size(self, label: str) -> int:
        """The size of dimension `label` in this point's extent."""
        return self.extent[label]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Point):
            return self.rank == other.rank and self.extent == other.extent
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash((self.rank, self.extent))

    def __repr__(self) -> str:
        parts = (f"{k!r}: {c}/{s}" for k, c, s in
                 zip(self.extent.labels, self._coords, self.extent.sizes))
        return "{" + ", ".join(parts) + "}"

    def __reduce__(self) -> Any:
        return Point, (self.rank, self.extent)


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """Base ranks arranged as a named, strided n-d array (an ndslice with labels)."""

    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def dense(labels: Sequence[str], sizes: Sequence[int], offset: int = 0) -> "View":
        """A row-major view of `prod(sizes)` consecutive ranks starting at `offset`."""
        return View(tuple(labels), tuple(sizes), _dense_strides(sizes), offset)

    def __len__(self) -> int:
        return _product(self.sizes)

    @property
    def extent(self) -> Extent:
        """Labels and sizes."""
        return Extent(self.labels, self.sizes)

    def coords(self, index: int) -> tuple[int, ...]:
        """The coordinates of the `index`-th point (row-major)."""
        return _unravel(index, self.sizes)

    def rank_at(self, index: int) -> int:
        """The base rank of the `index`-th point."""
        rank = self.offset
        for coord, stride in zip(_unravel(index, self.sizes), self.strides):
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
            stride = self.strides[dim]
            if stride and self.sizes[dim] > 1:
                coords[dim] = rest // stride
                rest -= coords[dim] * stride
        if rest or any(not 0 <= c < s for c, s in zip(coords, self.sizes)):
            raise ValueError(f"rank {rank} is not in {self}")
        index = 0
        for coord, size in zip(coords, self.sizes):
            index = index * size + coord
        return index

    def point(self, index: int) -> Point:
        """The `index`-th point, in this view's extent."""
        return Point(index, self.extent)

    def slice(self, **kwargs: Any) -> "View":
        """Selects along dimensions: an int drops the dimension, a slice keeps it (strided)."""
        labels, sizes, strides = list(self.labels), list(self.sizes), list(self.strides)
        offset = self.offset
        for label, sel in kwargs.items():
            if label not in labels:
                raise TypeError(f"Shape does not have dimension labeled {label!r}")
            dim = labels.index(label)
            if isinstance(sel, slice):
                start, stop, step = sel.indices(sizes[dim])
                count = len(range(start, stop, step))
                if count <= 0 or step <= 0:
                    raise ValueError(f"out of range {start}:{stop}:{step} for dimension "
                                     f"{label} of size {sizes[dim]}")
                offset += start * strides[dim]
                sizes[dim], strides[dim] = count, strides[dim] * step
            else:
                index = _as_index(sel)
                if not 0 <= index < sizes[dim]:
                    raise IndexError("index out of range")
                offset += index * strides[dim]
                del labels[dim], sizes[dim], strides[dim]
        return View(tuple(labels), tuple(sizes), tuple(strides), offset)

    def flatten(self, name: str) -> "View":
        """The same ranks as one dimension `name`; a sparse view cannot be flattened."""
        dense = _dense_strides(self.sizes)
        if any(s != d for s, d, n in zip(self.strides, dense, self.sizes) if n != 1):
            raise ValueError(f"cannot flatten sparse mesh: ndslice.strides={list(self.strides)}"
                             f" != dense_strides={list(dense)}")
        return View((name,), (len(self),), (1,), self.offset)

    def rename(self, **kwargs: str) -> "View":
        """Renames dimensions (`old=new`)."""
        labels = list(self.labels)
        for old, new in kwargs.items():
            if old not in labels:
                raise ValueError(f"{old!r} is not an existing dim. Expected an integer size "
                                 "constraint on a new dim.")
            labels[labels.index(old)] = new
        return View(tuple(labels), self.sizes, self.strides, self.offset)

    def split(self, **kwargs: Any) -> "View":
        """Splits dimensions: `split(host=("dp", "pp"), pp=16)` (one new size may be derived)."""
        splits = {k: v for k, v in kwargs.items() if k in self.labels}
        constraints = {k: v for k, v in kwargs.items() if k not in self.labels}
        for key, value in constraints.items():
            if not isinstance(value, int):
                raise ValueError(f"{key!r} is not an existing dim. Expected an integer size "
                                 "constraint on a new dim.")
        labels: list[str] = []
        sizes: list[int] = []
        strides: list[int] = []
        for label, size, stride in zip(self.labels, self.sizes, self.strides):
            new = splits.get(label)
            if new is None:
                labels.append(label)
                sizes.append(size)
                strides.append(stride)
                continue
            new = (new,) if isinstance(new, str) else tuple(new)
            new_sizes = _derive_sizes(label, size, new, constraints)
            inner = stride
            new_strides = []
            for s in reversed(new_sizes):
                new_strides.append(inner)
                inner *= s
            labels += new
            sizes += new_sizes
            strides += reversed(new_strides)
        unused = set(constraints) - set(labels)
        if unused:
            raise ValueError(f"size constraints {sorted(unused)} name no new dimension")
        return View(tuple(labels), tuple(sizes), tuple(strides), self.offset)

    def chunks(self, lo: int, hi: int, fanout: int) -> list[tuple[int, int]]:
        """Splits indices `(lo, hi)` (lo excluded: its receiver keeps it) into at most `fanout`
        contiguous, balanced ranges, for the children of a cast-tree hop."""
        count = hi - lo - 1
        if count <= 0:
            return []
        parts = min(fanout, count)
        base, extra = divmod(count, parts)
        out = []
        start = lo + 1
        for i in range(parts):
            size = base + (1 if i < extra else 0)
            out.append((start, start + size))
            start += size
        return out

    def to_wire(self) -> tuple:
        """A msgpack-friendly form: `(labels, sizes, strides, offset)`."""
        return (self.labels, self.sizes, self.strides, self.offset)

    @staticmethod
    def from_wire(wire: Sequence[Any]) -> "View":
        """The inverse of `to_wire`."""
        labels, sizes, strides, offset = wire
        return View(tuple(labels), tuple(sizes), tuple(strides), offset)


def _derive_sizes(label: str, size: int, new: tuple[str, ...],
                  constraints: dict[str, int]) -> list[int]:
    known = [constraints.get(n) for n in new]
    missing = [i for i, k in enumerate(known) if k is None]
    product = _product([k for k in known if k is not None])
    if len(missing) > 1:
        raise ValueError(f"cannot split {label} into {new}: give the sizes of all but one")
    if missing:
        if product == 0 or size % product:
            raise ValueError(f"cannot split dimension {label} of size {size} by {product}")
        known[missing[0]] = size // product
    elif product != size:
        raise ValueError(f"cannot split dimension {label} of size {size} into sizes {known}")
    return [int(k) for k in known]  # type: ignore[arg-type]


def _as_index(sel: Any) -> int:
    try:
        return int(sel.__index__())
    except AttributeError:
        raise TypeError(f"slice coordinates must be int or slice, got {sel!r}") from None


def _dense_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    strides = []
    stride = 1
    for size in reversed(sizes):
        strides.append(stride)
        stride *= size
    return tuple(reversed(strides))


def _unravel(index: int, sizes: Sequence[int]) -> tuple[int, ...]:
    coords = []
    for size in reversed(sizes):
        index, coord = divmod(index, size)
        coords.append(coord)
    return tuple(reversed(coords))


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
