"""One torch op on remote tensors becomes one recorded op (the hot path of the engine).

`dispatch` scans the arguments once (remote tensors become `Ref`s, and the scan builds the
signature that keys the metadata cache), checks that the tensors agree on mesh and stream and
may be accessed, learns the outputs' metadata (monarch._tensor._meta), makes the result
tensors and records `(OP, ...)` for the mesh. Nothing waits on the workers.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import _meta, _verbs
from ._mesh import DeviceMesh
from ._ops import CONST, OP
from ._proxy import Tensor, _no_data
from ._stream import active_stream

_aten = torch.ops.aten
_DATA_READS = frozenset({_aten._local_scalar_dense.default, _aten.is_nonzero.default,
                         _aten.equal.default})
# Reads of local tensors that stay local inside `activate()` (t.item(), t.tolist()).
_LOCAL_READS = frozenset({_aten._local_scalar_dense.default,
                          _aten.set_.source_Storage_storage_offset})
_LIFTS = frozenset({_aten.lift_fresh.default, _aten.lift.default})
_LOCAL = frozenset({"profiler._record_function_exit._RecordFunction",
                    "profiler._record_function_enter_new.default"})
_graph_task_id = torch._C._current_graph_task_id
_ATOMS = (int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def dispatch(func: Any, args: tuple, kwargs: dict, ambient: DeviceMesh | None) -> Any:
    """Records `func(*args, **kwargs)` for the mesh of its tensors (or `ambient`)."""
    if func in _DATA_READS and any(isinstance(a, Tensor) for a in args):
        raise _no_data(f"{func} (e.g. .item(), bool(t), torch.equal)")
    if func in _LOCAL_READS:
        return func(*args, **kwargs)
    if func in _LIFTS and type(args[0]) is not Tensor:
        return func(*args, **kwargs) if ambient is None else constant(args[0], ambient)
    tensors: list[Tensor] = []
    local: list[torch.Tensor] = []
    wargs, akey = _scan(args, tensors, local)
    wkwargs, kkey = _scan(kwargs, tensors, local)
    if not tensors and (ambient is None or str(func) in _LOCAL):
        return func(*args, **kwargs)
    if local:
        raise _incorrect(func, "a local (non-monarch) tensor is used while a mesh is active; "
                         "compute locally inside `with monarch.no_mesh.activate():`, or make it"
                         " on the mesh")
    mesh = _mesh_of(tensors, ambient, func)
    stream = active_stream()
    if tensors and _graph_task_id() != -1:
        stream = tensors[0].stream  # backward runs on the stream of the forward's tensors
    mutated = _mutated(func, args, kwargs)
    _check(func, tensors, mutated, stream)
    key = (func, akey, kkey)
    spec, leaves = _meta.propagate(func, key, args, kwargs, tensors)
    results, outs = _results(leaves, tensors, mesh, stream)
    engine = mesh._engine
    seq = engine.next_seq()
    engine.record(mesh._view, (OP, seq, stream._wire, _name(func), wargs, wkwargs, outs,
                               [t.ref for t in mutated]))
    return pytree.tree_unflatten(results, spec)


def constant(value: torch.Tensor, mesh: DeviceMesh) -> Tensor:
    """A remote tensor holding `value` (shipped with the batch) on every proc of `mesh`."""
    stream = active_stream()
    out = Tensor(_meta.meta_of(value), mesh, stream)
    engine = mesh._engine
    engine.record(mesh._view, (CONST, engine.next_seq(), stream._wire, value.detach(), out.ref))
    return out


def _scan(obj: Any, tensors: list, local: list) -> tuple[Any, Any]:
    """(wire form, signature) of an argument; collects remote tensors and local ones."""
    kind = type(obj)
    if kind is Tensor:
        tensors.append(obj)
        return obj._wire, obj._meta
    if kind is list or kind is tuple:
        wire, key = [], []
        for item in obj:
            w, k = _scan(item, tensors, local)
            wire.append(w)
            key.append(k)
        return (wire if kind is list else tuple(wire)), (kind, tuple(key))
    if kind is dict:
        wired, keyd = {}, []
        for name, item in obj.items():
            w, k = _scan(item, tensors, local)
            wired[name] = w
            keyd.append((name, k))
        return wired, tuple(keyd)
    if isinstance(obj, torch.Tensor):
        if isinstance(obj, Tensor):  # a subclass of ours (nn.Parameter of a remote tensor)
            tensors.append(obj)
            return obj._wire, obj._meta
        local.append(obj)
        return obj, None
    if isinstance(obj, _ATOMS):
        return obj, (kind, obj)
    return obj, [kind]  # unhashable: a signature with it is computed, never cached


def _mesh_of(tensors: list[Tensor], ambient: DeviceMesh | None, func: Any) -> DeviceMesh:
    if not tensors:
        if ambient is None:
            raise _incorrect(func, "remote tensors need an active mesh: `with mesh.activate():`")
        return ambient
    mesh = tensors[0].mesh
    for t in tensors:
        if t.mesh is not mesh and t.mesh != mesh:
            raise _incorrect(func, f"its tensors live on different meshes ({mesh!r} and "
                             f"{t.mesh!r}); move one with `to_mesh`")
    return mesh


def _check(func: Any, tensors: list[Tensor], mutated: list[Tensor], stream: Any) -> None:
    for t in tensors:
        if t.ref is None:
            where = f"\n  dropped at:\n{t._dropped_at}" if t._dropped_at else ""
            raise _incorrect(func, f"a tensor was dropped (t.drop()) and is no longer usable"
                             f"{where}")
        if t.stream is not stream:
            raise _incorrect(func, f"a tensor is on {t.stream} but the active stream is "
                             f"{stream}; use `with stream.activate():` or `stream.borrow(t)`")
        if t._aliases.access != "rw" and "r" not in t._aliases.access:
            raise _incorrect(func, "a tensor is borrowed mutably by another stream and cannot "
                             "be read until the borrow is dropped")
    for t in mutated:
        if "w" not in t._aliases.access:
            raise _incorrect(func, "a tensor this op writes is borrowed (read-only until the "
                             "borrow is dropped)")


def _results(leaves: tuple, tensors: list[Tensor], mesh: DeviceMesh,
             stream: Any) -> tuple[list[Any], list[int]]:
    results: list[Any] = []
    outs: list[int] = []
    for leaf in leaves:
        kind = leaf[0]
        if kind == _meta.SAME:
            t = tensors[leaf[1]]
        elif kind == _meta.VIEW:
            t = Tensor(leaf[2], mesh, stream, tensors[leaf[1]]._aliases)
        elif kind == _meta.NEW:
            t = Tensor(leaf[1], mesh, stream, None)
        else:
            results.append(leaf[1])
            continue
        results.append(t)
        outs.append(t.ref)  # type: ignore[arg-type]
    return results, outs


def _mutated(func: Any, args: tuple, kwargs: dict) -> list[Tensor]:
    positions, names = _written(func)
    if not positions and not names:
        return []
    found: list[Tensor] = []
    for i in positions:
        if i < len(args):
            _collect(args[i], found)
    for name in names:
        if name in kwargs:
            _collect(kwargs[name], found)
    return found


def _collect(obj: Any, found: list[Tensor]) -> None:
    if isinstance(obj, Tensor):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _collect(item, found)


@functools.cache
def _written(func: Any) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Positions and names of the arguments `func` writes in place (from its schema)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return (), ()
    positions: list[int] = []
    names: list[str] = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            names.append(arg.name)
            if not arg.kwarg_only:
                positions.append(i)
    return tuple(positions), tuple(names)


@functools.cache
def _name(func: Any) -> str:
    return str(func)


def _incorrect(func: Any, why: str) -> TypeError:
    return TypeError(f"Incorrect arguments to monarch operation {func}: {why}")


_verbs.dispatch = dispatch
