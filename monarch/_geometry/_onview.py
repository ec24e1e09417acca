"""Slicing and sizes, shared by everything laid out on a View (meshes and ValueMeshes)."""

from __future__ import annotations

from typing import Any, Self, Sequence

from ._view import Extent, View


class OnView:
    """Mixin for a class that holds `_view` and makes copies over another view with `_with`."""

    __slots__ = ()
    _view: View

    def _with(self, view: View) -> Self:
        raise NotImplementedError

    def slice(self, **kwargs: Any) -> Self:
        """The points at the given coordinates: an int drops the dimension, a slice keeps it.

        Raises:
            TypeError: a label is not a dimension.
            IndexError: an index is out of range.
            ValueError: a slice is empty or out of range.
        """
        return self._with(self._view.slice(**kwargs))

    def flatten(self, name: str) -> Self:
        """The same points along one dimension `name` (the view must be dense)."""
        return self._with(self._view.flatten(name))

    def rename(self, **kwargs: str) -> Self:
        """The same points with dimensions renamed (`old=new`)."""
        return self._with(self._view.rename(**kwargs))

    def split(self, **kwargs: Any) -> Self:
        """The same points with dimensions split: `split(host=("dp", "pp"), pp=16)`."""
        return self._with(self._view.split(**kwargs))

    @property
    def extent(self) -> Extent:
        """Dimension labels and sizes."""
        return self._view.extent

    @property
    def _labels(self) -> list[str]:
        # Monarch's own documentation reads `mesh._labels` (e.g. `dict.fromkeys(procs._labels,
        # 0)` to slice the first rank in its SPMD examples), so such programs run unchanged.
        return list(self._view.labels)

    @property
    def sizes(self) -> dict[str, int]:
        """Sizes by dimension label."""
        return dict(zip(self._view.labels, self._view.sizes))

    def size(self, label: str | Sequence[str] | None = None) -> int:
        """The number of points, or the product of the sizes of `label` (one or several)."""
        return self._view.size(label, owner=self)

    def __len__(self) -> int:
        return len(self._view)
