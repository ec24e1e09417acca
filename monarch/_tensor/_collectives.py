"""Mesh-level tensor operations, controller side: reduce, to_mesh, rank tensors.

Each is one op for the workers (monarch._tensor._groups runs them over torch.distributed
process groups, one per set of procs: gloo on CPU, NCCL for CUDA tensors): the bytes move
between the workers, never through the controller or the control messages.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.utils import _pytree as pytree

from . import _verbs
from ._dispatch import _incorrect
from ._mesh import DeviceMesh
from ._ops import MOVE, RANK, REDUCE
from ._proxy import Tensor
from ._stream import Stream, active_stream

REDUCTIONS = ("stack", "gather", "sum", "avg", "product", "min", "max", "band", "bor", "bxor")
_STACKS = ("stack", "gather")


def rank_tensor(mesh: DeviceMesh, dims: str | Sequence[str]) -> Tensor:
    """Each proc's coordinate along `dims` (row-major over several) as a remote 0-d tensor."""
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    for name in names:
        if name not in mesh.names:
            raise KeyError(f"{mesh!r} does not have dimension {name!r}")
    stream = active_stream()
    out = Tensor(((), (), 0, torch.int64, torch.device("cpu")), mesh, stream)
    engine = mesh._engine
    engine.record(mesh._view, (RANK, engine.next_seq(), stream._wire, out.ref, names))
    return out


def reduce_tensor(t: Tensor, dims: Any, reduction: str, scatter: bool, mesh: Any,
                  inplace: bool, out: Tensor | None) -> Tensor:
    """`t.reduce(...)` (see Tensor.reduce)."""
    if mesh is not None:
        raise NotImplementedError("reduce(mesh=...) is not supported (as in Monarch)")
    names = _reduce_dims(t.mesh, dims, reduction, scatter)
    stream = active_stream()
    checked = [t] if out is None else [t, out]
    written = [out] if out is not None else ([t] if inplace else [])
    _check_movable(f"reduce({reduction})", checked, stream, written)
    n = t.mesh.size(names[0]) if (reduction in _STACKS or scatter) else 1
    shape = _reduced_shape(tuple(t.shape), n, reduction, scatter)
    if inplace:
        if out is not None:
            raise ValueError("`out` cannot be used with inplace reduce.")
        if shape != tuple(t.shape):
            raise ValueError(f"reduction {reduction} is not valid for in-place operation "
                             "because the output size will not match the input size.")
        result, mode = t, 1
    elif out is not None:
        if tuple(out.shape) != shape:
            raise ValueError(f"The given output shape, {tuple(out.shape)}, is incorrect. "
                             f"Reduce expects the shape to be {shape}.")
        result, mode = out, 2
    else:
        result, mode = Tensor(_contiguous(shape, t.dtype, t.device), t.mesh, stream), 0
    engine = t.mesh._engine
    engine.record(t.mesh._view, (REDUCE, engine.next_seq(), stream._wire, t.ref, result.ref,
                                 names, reduction, scatter, mode, _spec(t)))
    return result


def _reduce_dims(mesh: DeviceMesh, dims: Any, reduction: str, scatter: bool) -> tuple[str, ...]:
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    for d in names:
        if d not in mesh.names:
            raise KeyError(f"dim {d} not found in {mesh!r}")
    if not names:
        names = mesh.names
    if len(set(names)) != len(names):
        raise ValueError(f"reducing the same dimension twice: {names}")
    if len(names) > 1 and (reduction in _STACKS or scatter):
        raise ValueError(f"reduction {reduction} or scatter = {scatter} is not valid for "
                         "multiple dimensions")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction {reduction} not supported, reductions are {REDUCTIONS}")
    return names


def _reduced_shape(shape: tuple[int, ...], n: int, reduction: str,
                   scatter: bool) -> tuple[int, ...]:
    if scatter:
        if not shape or shape[0] != n:
            raise TypeError(f"When scattering results the outer most dimension of tensor with "
                            f"sizes ({list(shape)} must match the size ({n})")
        return shape if reduction in _STACKS else shape[1:]
    return (n, *shape) if reduction in _STACKS else shape


class MeshSliceTensor:
    """A remote tensor's values on a slice of its mesh: `t.slice_mesh(pp=0).to_mesh(stage)`."""

    def __init__(self, tensor: Tensor, slicing: DeviceMesh) -> None:
        self.tensor = tensor
        self.slicing = slicing

    def to_mesh(self, mesh: Any, stream: Stream | None = None) -> Tensor:
        """A copy on `mesh`: dimensions both meshes have must have the same size; along a
        dimension only `mesh` has, every proc receives a copy (broadcast)."""
        dst = _device_mesh(mesh)
        src, t = self.slicing, self.tensor
        to_stream = stream if stream is not None else t.stream
        if dst._engine is not src._engine:
            raise NotImplementedError("to_mesh between meshes of different proc meshes")
        _check_movable(f"to_mesh({dst!r})", [t], t.stream, written=[])
        for name in src.names:
            if name not in dst.names and src.size(name) != 1:
                raise ValueError(f"to_mesh: dimension {name} of the source is not in {dst!r}; "
                                 f"slice it first (t.slice_mesh({name}=i))")
        for name in dst.names:
            if name in src.names and src.size(name) != dst.size(name):
                raise ValueError(f"dimension {name} of destination device_mesh has a different "
                                 "length than the source tensor")
        out = Tensor(_contiguous(tuple(t.shape), t.dtype, t.device), dst, to_stream)
        engine = dst._engine
        engine.record(engine.full, (MOVE, engine.next_seq(), t.stream._wire, t.ref, out.ref,
                                    src._view.to_wire(), dst._view.to_wire(), _spec(t),
                                    to_stream._wire))
        return out


def _device_mesh(mesh: Any) -> DeviceMesh:
    if isinstance(mesh, DeviceMesh):
        return mesh
    if hasattr(mesh, "_procs") and hasattr(mesh, "_view"):  # a ProcMesh
        return DeviceMesh.of(mesh)
    raise TypeError(f"to_mesh expects a ProcMesh or DeviceMesh, not {type(mesh).__name__}")


def _check_movable(what: str, tensors: list[Tensor], stream: Stream,
                   written: list[Tensor]) -> None:
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"Incorrect arguments to monarch operation {what}: "
                            f"{type(t).__name__} is not a remote monarch tensor")
        if torch.is_grad_enabled() and t.requires_grad:
            raise TypeError(f"Incorrect arguments to monarch operation {what}: the tensor "
                            "requires gradients but this operation does not work with autograd "
                            "(use `with torch.no_grad():`)")
        if t.ref is None:
            raise _incorrect(what, "a tensor was dropped and is no longer usable")
        if t.stream is not stream:
            raise _incorrect(what, f"a tensor is on {t.stream} but the active stream is {stream}")
        if "r" not in t._aliases.access:
            raise _incorrect(what, "a tensor is borrowed mutably by another stream")
    for t in written:
        if "w" not in t._aliases.access:
            raise _incorrect(what, "the output tensor is borrowed (read-only)")


def _spec(t: Tensor) -> tuple[tuple[int, ...], torch.dtype, str]:
    return tuple(t.shape), t.dtype, str(t.device)


def _contiguous(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return (shape, tuple(reversed(strides)), 0, dtype, device)


def reduce(tensors: Any, dims: Any, reduction: str = "sum", scatter: bool = False,
           mesh: Any = None, _inplace: bool = False) -> Any:
    """`reduce` on every remote tensor of a pytree."""
    return pytree.tree_map(lambda t: t.reduce(dims, reduction, scatter, mesh, _inplace), tensors)


def reduce_(tensors: Any, dims: Any, reduction: str = "sum", scatter: bool = False,
            mesh: Any = None) -> Any:
    """`reduce_` on every remote tensor of a pytree."""
    return reduce(tensors, dims, reduction, scatter, mesh, _inplace=True)


def to_mesh(tensors: Any, mesh: Any, stream: Stream | None = None) -> Any:
    """`to_mesh` on every remote tensor (or mesh slice of one) of a pytree."""
    return pytree.tree_map(lambda t: t.to_mesh(mesh, stream), tensors,
                           is_leaf=lambda x: isinstance(x, MeshSliceTensor))


def slice_mesh(tensors: Any, **kwargs: Any) -> Any:
    """`slice_mesh` on every remote tensor of a pytree."""
    return pytree.tree_map(lambda t: t.slice_mesh(**kwargs), tensors)


_verbs.reduce_tensor = reduce_tensor
_verbs.rank_tensor = rank_tensor
_verbs.mesh_slice = MeshSliceTensor
