"""ValueMesh: one value per point of a mesh (what `call` returns)."""

from __future__ import annotations

import pprint
from typing import Any, Generic, Iterable, Iterator, TypeVar

from ._shape import Extent, Point, View

R = TypeVar("R")


class ValueMesh(Generic[R]):
    """Values laid out on an extent, in row-major order.

    Prints as Monarch does: `ValueMesh({gpus: 2}):` then the pprint of its `(point, value)`
    items. Slicing, `flatten`, `rename` and `split` return ValueMeshes over the same values.
    """

    def __init__(self, shape: "Extent | View", values: Iterable[R]) -> None:
        self._values = list(values)
        if isinstance(shape, View):
            self._view = View.dense(shape.labels, shape.sizes)
        else:
            self._view = View.dense(shape.labels, shape.sizes)
        if len(self._values) != len(self._view):
            raise ValueError(f"{len(self._values)} values for a mesh of {len(self._view)} points")

    @classmethod
    def _over(cls, view: View, values: list[Any]) -> "ValueMesh[Any]":
        mesh: ValueMesh[Any] = cls.__new__(cls)
        mesh._values = values
        mesh._view = view
        return mesh

    @classmethod
    def from_indexed(cls, shape: "Extent | View", pairs: Iterable[tuple[int, R]]) -> "ValueMesh[R]":
        """Builds a mesh from `(rank, value)` pairs; a later pair for a rank wins."""
        values: dict[int, R] = dict(pairs)
        size = len(View.dense(shape.labels, shape.sizes))
        missing = [r for r in range(size) if r not in values]
        if missing:
            raise ValueError(f"no value for ranks {missing}")
        return cls(shape, [values[r] for r in range(size)])

    # -- access ----------------------------------------------------------------------------
    def items(self) -> Iterator[tuple[Point, R]]:
        """`(point, value)` pairs in row-major order."""
        view, values = self._view, self._values
        extent = view.extent
        for index in range(len(view)):
            yield Point(index, extent), values[view.rank_at(index)]

    def values(self) -> Iterator[R]:
        """The values in row-major order."""
        view, values = self._view, self._values
        return (values[view.rank_at(i)] for i in range(len(view)))

    def item(self, **kwargs: int) -> R:
        """The value at the given coordinates (every dimension named; none for a single value)."""
        coords = []
        for label in self._view.labels:
            if label not in kwargs:
                raise KeyError(label)
            coords.append(kwargs[label])
        unknown = set(kwargs) - set(self._view.labels)
        if unknown:
            raise KeyError(sorted(unknown)[0])
        return self._values[self._view.slice(**kwargs).offset]

    def get(self, rank: int) -> R:
        """The value of the `rank`-th point (row-major)."""
        return self._values[self._view.rank_at(rank)]

    def __iter__(self) -> Iterator[tuple[Point, R]]:
        return self.items()

    def __len__(self) -> int:
        return len(self._view)

    # -- geometry --------------------------------------------------------------------------
    def slice(self, **kwargs: Any) -> "ValueMesh[R]":
        """The values at the given coordinates: an int drops the dimension, a slice keeps it."""
        return self._over(self._view.slice(**kwargs), self._values)

    def flatten(self, name: str) -> "ValueMesh[R]":
        """The same values along one dimension `name`."""
        return self._over(self._view.flatten(name), self._values)

    def rename(self, **kwargs: str) -> "ValueMesh[R]":
        """The same values with dimensions renamed (`old=new`)."""
        return self._over(self._view.rename(**kwargs), self._values)

    def split(self, **kwargs: Any) -> "ValueMesh[R]":
        """The same values with dimensions split (see `View.split`)."""
        return self._over(self._view.split(**kwargs), self._values)

    @property
    def extent(self) -> Extent:
        """Dimension labels and sizes."""
        return self._view.extent

    @property
    def sizes(self) -> dict[str, int]:
        """Sizes by dimension label."""
        return dict(zip(self._view.labels, self._view.sizes))

    def size(self, label: str | None = None) -> int:
        """The number of values, or the size of dimension `label`."""
        return len(self._view) if label is None else self.sizes[label]

    def __repr__(self) -> str:
        body = pprint.pformat(tuple(self.items()))
        return f"ValueMesh({self.extent}):\n" + "\n".join("  " + line for line in body.split("\n"))

    __str__ = __repr__

    def __reduce__(self) -> Any:
        return ValueMesh._over, (self._view, self._values)
