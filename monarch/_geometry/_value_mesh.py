"""ValueMesh: one value per point of a mesh (what `call` returns)."""

from __future__ import annotations

import pprint
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ._extent import unsigned
from ._onview import OnView
from ._view import Point, View

R = TypeVar("R")


class Shaped(Protocol):
    """Anything with dimension labels and sizes: an Extent, a View."""

    @property
    def labels(self) -> Sequence[str]: ...

    @property
    def sizes(self) -> Sequence[int]: ...


class ValueMesh(OnView, Generic[R]):
    """Values laid out on a named n-d extent, one per point, in row-major order.

    Prints as Monarch does: `ValueMesh({gpus: 2}):` then the `pprint` of its `(point, value)`
    items, indented by two spaces. Iterating yields those items. `slice`, `flatten`, `rename`
    and `split` return ValueMeshes sharing the same values. Equality is identity, as Monarch's.
    `ValueMesh[int]` is ValueMesh itself at run time (as in Monarch; type checkers see the
    generic).

    Args:
        shape: labels and sizes (an Extent or a View; a View's strides and offset are ignored).
        values: the values in row-major order, one per point.
    """

    __slots__ = ("__weakref__", "_values", "_view")

    _view: View  # which of `_values` this mesh shows, and how they are laid out
    _values: list[Any]  # may hold more values than the view shows (slices share it)

    def __init__(self, shape: Shaped, values: Iterable[R]) -> None:
        self._view = View.dense(shape.labels, shape.sizes)
        self._values = list(values)
        if len(self._values) != len(self._view):
            raise ValueError(f"invalid value mesh: expected {len(self._view)} ranks, but "
                             f"contains {len(self._values)} ranks")

    def __class_getitem__(cls, item: Any) -> Any:
        return cls

    @classmethod
    def from_indexed(cls, shape: Shaped, pairs: Iterable[tuple[int, R]]) -> ValueMesh[R]:
        """Builds a mesh from `(rank, value)` pairs; a later pair for a rank wins."""
        size = len(View.dense(shape.labels, shape.sizes))
        values: dict[int, R] = {}
        for pair in pairs:
            if len(pair) != 2:
                raise ValueError(f"expected tuple of length 2, but got "
                                 f"{type(pair).__name__} of length {len(pair)}")
            values[unsigned(pair[0], "pairs")] = pair[1]
        if len(values) != size or (values and max(values) >= size):
            found = max(values) + 1 if values and max(values) >= size else len(values)
            raise ValueError(f"invalid value mesh: expected {size} ranks, but contains "
                             f"{found} ranks")
        return cls(shape, [values[rank] for rank in range(size)])

    def _with(self, view: View) -> ValueMesh[R]:
        mesh: ValueMesh[R] = object.__new__(type(self))
        mesh._view = view
        mesh._values = self._values
        return mesh

    # -- access ----------------------------------------------------------------------------
    def items(self) -> Iterator[tuple[Point, R]]:
        """`(point, value)` pairs in row-major order (points in this mesh's extent)."""
        extent, values = self._view.extent, self._values
        for index, rank in enumerate(self._view.ranks()):
            yield Point(index, extent), values[rank]

    def values(self) -> list[R]:
        """The values in row-major order."""
        values = self._values
        return [values[rank] for rank in self._view.ranks()]

    def item(self, **coords: int) -> R:
        """The value at `coords`, which name every dimension (none for a mesh without any).

        Raises:
            KeyError: a dimension is missing, or a label is not a dimension.
            IndexError: a coordinate is out of range.
        """
        return self._values[self._view.rank_of(coords)]

    def get(self, rank: int) -> R:
        """The value of the `rank`-th point (row-major)."""
        index = unsigned(rank, "rank")
        if index >= len(self._view):
            raise ValueError(f"index {index} out of range (len={len(self._view)})")
        return self._values[self._view.rank_at(index)]

    def __iter__(self) -> Iterator[tuple[Point, R]]:
        return self.items()

    def __len__(self) -> int:
        return len(self._view)

    # -- printing and pickling -------------------------------------------------------------
    def __repr__(self) -> str:
        body = pprint.pformat(tuple(self.items()))
        return f"ValueMesh({self.extent}):\n" + "\n".join("  " + line for line in body.split("\n"))

    __str__ = __repr__

    def __reduce__(self) -> Any:
        # Only the values this mesh shows travel, densely.
        return type(self), (self.extent, self.values())
