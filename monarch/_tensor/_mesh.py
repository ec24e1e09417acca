"""DeviceMesh: a proc mesh seen by the tensor engine, and `activate()`.

`with mesh.activate():` makes `mesh` the ambient mesh and pushes a TorchDispatchMode, so every
torch op in the block, including factories like `torch.rand(3, 4)` that have no tensor inputs,
is recorded for the mesh instead of computed here. Ops on remote tensors run on their own mesh
whether or not a mesh is active. The ambient mesh is a process-wide value, as in Monarch (the
dispatch mode itself is per thread: torch keeps mode stacks per thread).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

from torch.utils._python_dispatch import TorchDispatchMode

from .._geometry._onview import OnView
from .._geometry._view import View
from . import _verbs
from ._engine import Engine, engine_of


class DeviceMesh(OnView):
    """The tensor engine's view of (a slice of) a proc mesh: where remote tensors live.

    `activate()` makes it the ambient mesh; `rank(dim)` is each proc's coordinate as a remote
    tensor; slicing (`slice`, `rename`, `split`, `flatten`) gives other meshes of the same engine.
    """

    def __init__(self, engine: Engine, view: View) -> None:
        self._engine = engine
        self._view = view

    def _with(self, view: View) -> "DeviceMesh":
        return DeviceMesh(self._engine, view)

    @property
    def names(self) -> tuple[str, ...]:
        """The dimension names."""
        return self._view.labels

    @classmethod
    def of(cls, proc_mesh: Any) -> "DeviceMesh":
        """The DeviceMesh of a ProcMesh (its engine is made on first use)."""
        return cls(engine_of(proc_mesh), proc_mesh._view)

    def activate(self) -> "Activation":
        """Makes this the ambient mesh until the returned context exits (`with` or not)."""
        return Activation(self)

    def rank(self, dims: str | Sequence[str]) -> Any:
        """A remote 0-d int64 tensor holding each proc's coordinate along `dims` (several dims
        combine row-major)."""
        return _verbs.rank_tensor(self, dims)

    @property
    def ranks(self) -> dict[str, Any]:
        """`rank(dim)` for every dimension."""
        return {dim: self.rank(dim) for dim in self.names}

    def to_table(self) -> str:
        """A plain-text grid of which proc holds each point of the mesh."""
        from ._table import grid

        full = self._engine.full
        values = [[full.coords(full.index_of(r))] for r in self._view.ranks()]
        cells = ["(" + ", ".join(map(str, c[0])) + ")" for c in values]
        return grid(cells, self._view.labels, self._view.sizes,
                    title=f"procs, as coordinates in {dict(zip(full.labels, full.sizes))}")

    def __deepcopy__(self, memo: dict[int, Any]) -> "DeviceMesh":
        return self  # a place, not a value: copies of tensors live on the same mesh

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DeviceMesh) and other._engine is self._engine
                and other._view == self._view)

    def __hash__(self) -> int:
        return hash((id(self._engine), self._view))

    def __repr__(self) -> str:
        ranks = self._view.ranks()
        shown = ranks if len(ranks) <= 8 else [*ranks[:4], "...", *ranks[-2:]]
        return f"<DeviceMesh {self.extent} procs {shown}>".replace("'", "")


class Activation:
    """The context of `DeviceMesh.activate()`: active from creation until `__exit__`."""

    def __init__(self, mesh: DeviceMesh | None) -> None:
        self._mesh = mesh
        self._exit = _activate(mesh)
        self._exit.__enter__()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self._exit.__exit__(None, None, None)


_active: DeviceMesh | None = None
_local = threading.local()


def active_mesh() -> DeviceMesh | None:
    """The ambient mesh (None outside `activate()`, or inside `no_mesh.activate()`)."""
    return _active


def get_active_mesh() -> DeviceMesh:
    """The ambient mesh; ValueError when none is active."""
    if _active is None:
        raise ValueError("no device mesh is active")
    return _active


@contextlib.contextmanager
def _activate(mesh: DeviceMesh | None) -> Iterator[None]:
    global _active
    old, _active = _active, mesh
    try:
        with _dispatching():
            yield
    finally:
        _active = old
        if mesh is not None:
            mesh._engine.flush()


@contextlib.contextmanager
def _dispatching() -> Iterator[None]:
    if getattr(_local, "on", False):
        yield
        return
    _local.on = True
    try:
        with _AmbientDispatch():
            yield
    finally:
        _local.on = False


class _AmbientDispatch(TorchDispatchMode):
    """Records every op made while a mesh is active (factories included) for that mesh."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no torch.compile wrapper around every op (~10 µs each)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        return _verbs.dispatch(func, args, kwargs or {}, _active)


class _NoMesh:
    """`with no_mesh.activate():` runs torch locally inside an activated block."""

    def activate(self) -> Activation:
        return Activation(None)


no_mesh = _NoMesh()


def flush_all() -> None:
    """Sends what every engine has waiting."""
    from ._engine import _engines

    for engine in list(_engines.values()):
        engine.flush()


__all__ = ["DeviceMesh", "active_mesh", "get_active_mesh", "no_mesh"]
