"""Extent (named dimension sizes) and Point (one position in an extent), printed as Monarch does.

Argument checks and their texts follow torchmonarch 0.7.0 (whose versions of these classes are
native code): a negative rank or size is an `OverflowError`, a non-integer one a `TypeError`.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class DimensionNotFound(KeyError, ValueError):
    """A label that is not a dimension was looked up in an Extent or a Point.

    Monarch raises `ValueError` here; this is also a `KeyError`, so that the Mapping protocol
    (`point.get(label, default)`, `label in point`) works.
    """

    def __init__(self, label: object) -> None:
        super().__init__(f"Dimension {label!r} not found")
        self.label = label

    def __str__(self) -> str:
        return str(self.args[0])


class Extent:
    """Dimension labels and their sizes, in order; prints as `{hosts: 2, gpus: 4}`.

    Attributes read as lists (`labels`, `sizes`), like Monarch's; the object itself is immutable,
    hashable and picklable. `dict(extent)` gives `{'hosts': 2, 'gpus': 4}`.

    Args:
        labels: dimension names.
        sizes: dimension sizes (non-negative integers), one per label.
    """

    __slots__ = ("_labels", "_sizes")

    _labels: tuple[str, ...]
    _sizes: tuple[int, ...]

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        labels = tuple(check_label(label) for label in _sequence(labels, "labels"))
        sizes = tuple(unsigned(size, "sizes") for size in _sequence(sizes, "sizes"))
        if len(labels) != len(sizes):
            raise ValueError(f"label/sizes dimension mismatch: {len(labels)} != {len(sizes)}")
        _set(self, "_labels", labels)
        _set(self, "_sizes", sizes)

    @classmethod
    def _trusted(cls, labels: tuple[str, ...], sizes: tuple[int, ...]) -> Extent:
        # For labels and sizes already checked (a View's): the runtime builds one per call.
        extent = object.__new__(cls)
        _set(extent, "_labels", labels)
        _set(extent, "_sizes", sizes)
        return extent

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"attribute {name!r} of 'Extent' objects is not writable")

    @property
    def labels(self) -> list[str]:
        """The dimension names, in order (a fresh list)."""
        return list(self._labels)

    @property
    def sizes(self) -> list[int]:
        """The dimension sizes, in order (a fresh list)."""
        return list(self._sizes)

    @property
    def nelements(self) -> int:
        """The number of points (1 for an extent without dimensions)."""
        return product(self._sizes)

    def keys(self) -> list[str]:
        """The dimension names, in order."""
        return list(self._labels)

    def __getitem__(self, label: str) -> int:
        return self._sizes[label_index(self._labels, label)]

    def __contains__(self, label: object) -> bool:
        return label in self._labels

    def __len__(self) -> int:
        return len(self._labels)

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Extent):
            return NotImplemented
        return self._labels == other._labels and self._sizes == other._sizes

    def __hash__(self) -> int:
        return hash((self._labels, self._sizes))

    def __repr__(self) -> str:
        items = (f"{_bare_or_quoted(k)}: {v}" for k, v in zip(self._labels, self._sizes))
        return "{" + ", ".join(items) + "}"

    def __reduce__(self) -> Any:
        return Extent, (self._labels, self._sizes)


class Point(Mapping[str, int]):
    """The `rank`-th point (row-major) of an extent, read as a mapping from label to coordinate.

    Prints as `{'hosts': 1/2, 'gpus': 3/4}`; `dict(point)` is `{'hosts': 1, 'gpus': 3}`. Two
    points are equal when their ranks and extents are (a Point never equals a plain dict).

    Args:
        rank: the point's row-major index in `extent`.
        extent: the extent the point lies in.
    """

    __slots__ = ("_coords", "extent", "rank")

    rank: int
    extent: Extent
    _coords: tuple[int, ...]

    def __init__(self, rank: int, extent: Extent) -> None:
        rank = unsigned(rank, "rank")
        if not isinstance(extent, Extent):
            raise TypeError(f"argument 'extent': '{type(extent).__name__}' object cannot be "
                            "cast as 'Extent'")
        if rank >= extent.nelements:
            raise ValueError(f"out of range: total ranks {extent.nelements}; "
                             f"does not contain rank {rank}")
        _set(self, "rank", rank)
        _set(self, "extent", extent)
        _set(self, "_coords", unravel(rank, extent._sizes))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"attribute {name!r} of 'Point' objects is not writable")

    def __getitem__(self, label: str) -> int:
        return self._coords[label_index(self.extent._labels, label)]

    def __contains__(self, label: object) -> bool:
        return label in self.extent._labels

    def __iter__(self) -> Iterator[str]:
        return iter(self.extent._labels)

    def __len__(self) -> int:
        return len(self._coords)

    def keys(self) -> list[str]:  # type: ignore[override]
        """The dimension names, in order (a list, as Monarch returns)."""
        return list(self.extent._labels)

    def size(self, label: str) -> int:
        """The size of dimension `label` of this point's extent."""
        return self.extent[label]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Point):
            return NotImplemented
        return self.rank == other.rank and self.extent == other.extent

    def __hash__(self) -> int:
        return hash((self.rank, self.extent))

    def __repr__(self) -> str:
        parts = (f"'{k}': {c}/{s}" for k, c, s in
                 zip(self.extent._labels, self._coords, self.extent._sizes))
        return "{" + ", ".join(parts) + "}"

    def __reduce__(self) -> Any:
        return Point, (self.rank, self.extent)


_set = object.__setattr__  # how the immutable classes here fill their slots


def unsigned(value: Any, argument: str) -> int:
    """`value` as a non-negative int, with the errors Monarch's native arguments give."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"argument '{argument}': '{type(value).__name__}' object cannot be "
                        "interpreted as an integer") from None
    if number < 0:
        raise OverflowError("can't convert negative int to unsigned")
    return number


def check_label(label: Any, argument: str = "labels") -> str:
    """`label` if it is a str; Monarch's TypeError otherwise."""
    if not isinstance(label, str):
        raise TypeError(f"argument '{argument}': '{type(label).__name__}' object cannot be "
                        "cast as 'str'")
    return label


def label_index(labels: tuple[str, ...], label: Any) -> int:
    """The position of `label`; DimensionNotFound if it is not one of `labels`."""
    try:
        return labels.index(label)
    except ValueError:
        raise DimensionNotFound(check_label(label, "label")) from None


def unravel(index: int, sizes: Sequence[int]) -> tuple[int, ...]:
    """The row-major coordinates of `index` in an array of `sizes`."""
    coords = []
    for size in reversed(sizes):
        index, coord = divmod(index, size)
        coords.append(coord)
    return tuple(reversed(coords))


def product(values: Sequence[int]) -> int:
    """The product of `values` (1 when empty)."""
    out = 1
    for value in values:
        out *= value
    return out


def _sequence(values: Any, argument: str) -> Sequence[Any]:
    if isinstance(values, str):
        raise TypeError(f"argument '{argument}': Can't extract `str` to `Vec`")
    return list(values)


def _bare_or_quoted(label: str) -> str:
    # Monarch prints a label bare when it is made of ASCII letters, digits and '_' only.
    if all(c.isascii() and (c.isalnum() or c == "_") for c in label):
        return label
    return json.dumps(label, ensure_ascii=False)
