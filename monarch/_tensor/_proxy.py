"""The controller's handle on a remote tensor: a torch.Tensor without data.

`Tensor` is a wrapper subclass (`_make_wrapper_subclass`): it has a real shape, strides, dtype
and device, so torch code (autograd, nn.Module, optimizers) handles it as any tensor, but every
op on it reaches `__torch_dispatch__`, which records the op for the tensor's mesh instead of
computing (monarch._tensor._dispatch). It holds the id of the remote tensor in its engine's
workers; dropping the last reference frees the remote tensor (a DELETE op in the next batch).
"""

from __future__ import annotations

import traceback
import weakref
from typing import TYPE_CHECKING, Any

import torch

from . import _verbs
from ._ops import Ref

if TYPE_CHECKING:
    from ._mesh import DeviceMesh
    from ._stream import Stream

class StorageAliases:
    """The remote tensors sharing one storage (a tensor and its views), and what may be done
    with them now: `access` holds "r" (read) and "w" (write) while no borrow restricts it."""

    __slots__ = ("access", "borrowed_from", "borrows", "members", "__weakref__")

    def __init__(self, borrowed_from: "StorageAliases | None" = None) -> None:
        self.access = "rw"
        self.borrowed_from = borrowed_from
        self.borrows: list[Any] = []  # live Borrows of this storage
        # The tensors of a borrowed storage, so that dropping the borrow frees them all.
        self.members: weakref.WeakSet[Tensor] | None = (
            None if borrowed_from is None else weakref.WeakSet())


class Tensor(torch.Tensor):
    """A tensor whose values live on every proc of a mesh (one local tensor per proc).

    Made by torch ops inside `mesh.activate()` (or on other remote tensors); read with
    `monarch.inspect` / `monarch.fetch_shard`. Attributes: `mesh` (the DeviceMesh it lives on),
    `stream` (the Stream its ops run on), `ref` (its id on the workers; None once dropped).
    """

    ref: int | None
    mesh: "DeviceMesh"
    stream: "Stream"
    _meta: tuple
    _wire: Ref
    _aliases: StorageAliases
    _dropped_at: str | None

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, meta: tuple, mesh: "DeviceMesh", stream: "Stream",
                aliases: StorageAliases | None = None) -> "Tensor":
        size, stride, offset, dtype, device = meta
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=device,
            requires_grad=False)
        ref = mesh._engine.new_ref()
        r.ref = ref
        r._wire = Ref(ref)
        r._meta = meta
        r.mesh = mesh
        r.stream = stream
        if aliases is None:
            aliases = StorageAliases()
        elif aliases.members is not None:
            aliases.members.add(r)
        r._aliases = aliases
        r._dropped_at = None
        return r

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
        return _verbs.dispatch(func, args, kwargs or {}, None)

    # -- lifetime ----------------------------------------------------------------------------
    def drop(self) -> None:
        """Frees the remote tensor now (and makes this handle unusable)."""
        if self.ref is not None:
            self._dropped_at = "".join(traceback.format_stack(limit=8)[:-1])
            self._free()

    @property
    def dropped(self) -> bool:
        """True once `drop()` freed the remote tensor."""
        return self.ref is None

    def _free(self) -> None:
        ref, self.ref = self.ref, None
        if ref is not None:
            self.mesh._engine.drop_ref(self.mesh._view, self.stream._wire, ref)

    def __del__(self) -> None:
        ref = getattr(self, "ref", None)
        if ref is not None:
            self.ref = None
            self.mesh._engine.drop_ref(self.mesh._view, self.stream._wire, ref)

    # -- things that need the data -------------------------------------------------------------
    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return (f"monarch.Tensor(mesh={self.mesh!r}, stream={self.stream!r}, "
                f"shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})")

    def __format__(self, spec: str) -> str:
        return repr(self)

    def tolist(self) -> Any:  # type: ignore[override]
        raise _no_data("tolist()")

    def numpy(self, *, force: bool = False) -> Any:  # type: ignore[override]
        raise _no_data("numpy()")

    def __array__(self, dtype: Any = None) -> Any:
        raise _no_data("numpy conversion")

    def __deepcopy__(self, memo: dict[int, Any]) -> "Tensor":
        """A remote copy (`clone` on the mesh), keeping requires_grad, parameter-ness, grad."""
        import copy

        found = memo.get(id(self))
        if found is not None:
            return found
        with torch.no_grad():
            new: Tensor = self.clone()  # type: ignore[assignment]
        new.requires_grad_(self.requires_grad)
        if getattr(self, "_is_param", False):
            new._is_param = True  # type: ignore[attr-defined]
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a remote monarch.Tensor cannot be pickled: its values live on the "
                        "mesh; pass it to a monarch.remote function, or fetch it with "
                        "monarch.fetch_shard")

    # -- mesh operations (their code: monarch._tensor._collectives) -------------------------------------------
    def reduce(self, dims: Any, reduction: str = "sum", scatter: bool = False,
               mesh: Any = None, _inplace: bool = False, out: Any = None) -> "Tensor":
        """Reduces across mesh dimension(s) `dims` ("sum", "avg", "product", "min", "max",
        "band", "bor", "bxor", or "stack"/"gather" to stack the values along a new first
        dimension); every proc gets the result. `scatter=True` splits the result across `dims`
        (reduce-scatter; with "stack", all-to-all)."""
        return _verbs.reduce_tensor(self, dims, reduction, scatter, mesh, _inplace, out)

    def reduce_(self, dims: Any, reduction: str = "sum", scatter: bool = False,
                mesh: Any = None) -> "Tensor":
        """`reduce` in place: this tensor holds the result (returns it)."""
        return _verbs.reduce_tensor(self, dims, reduction, scatter, mesh, True, None)

    def to_mesh(self, mesh: Any, stream: Any = None) -> "Tensor":
        """A copy of this tensor on `mesh` (same sizes along the dimensions both have; a
        dimension only `mesh` has receives copies)."""
        return _verbs.mesh_slice(self, self.mesh).to_mesh(mesh, stream)

    def slice_mesh(self, **kwargs: Any) -> Any:
        """This tensor's values on a slice of its mesh (use `.to_mesh(...)` on the result)."""
        return _verbs.mesh_slice(self, self.mesh.slice(**kwargs))


def _no_data(what: str) -> TypeError:
    return TypeError(f"{what} needs the values of a remote monarch.Tensor, which live on the "
                     "mesh: fetch them first (monarch.inspect(t) or monarch.fetch_shard(t))")
