"""`monarch.remote`: run your own function on every proc of a mesh, on its local tensors.

    @monarch.remote(propagate=lambda x: x.new_empty(x.shape))
    def scaled(x):
        return x * 2

    with mesh.activate():
        y = scaled(torch.rand(3))    # a remote tensor; nothing waits

The controller needs the metadata of the result without running the function: `propagate`
computes it on fake tensors (a callable with the function's signature), or, when omitted, the
function is run once on the first proc of the mesh with the real inputs and its result's
metadata is cached for inputs of the same signature ("cached"; the function then runs twice
there). `propagate="inspect"` says the function returns no tensors (its result is only read by
`call_on_shard_and_fetch`). The function travels by reference when importable, by value
(cloudpickle) otherwise.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from . import _meta
from ._dispatch import _check, _mesh_of, _results, _scan
from ._fetch import remote_exception
from ._mesh import active_mesh
from ._ops import CALL, Failure, Placeholder
from ._proxy import Tensor
from ._stream import active_stream


class Remote:
    """A function callable on remote tensors (made by `monarch.remote`)."""

    def __init__(self, impl: Any, propagate: Any) -> None:
        if not (callable(impl) or (isinstance(impl, str) and "." in impl)):
            raise ValueError(f"Unsupported target for a remote call: {impl!r}")
        self._remote_impl = impl
        self._propagate = propagate
        self._cache: dict[Any, Any] = {}
        if callable(impl):
            functools.update_wrapper(self, impl)

    def _target(self) -> Any:
        return self._remote_impl

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.rref(*args, **kwargs)

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        """Records the call on every proc of the mesh; returns remote tensors for its result."""
        tensors: list[Tensor] = []
        local: list[torch.Tensor] = []
        wargs, akey = _scan(args, tensors, local)
        wkwargs, kkey = _scan(kwargs, tensors, local)
        name = getattr(self._remote_impl, "__qualname__", self._remote_impl)
        if local:
            raise TypeError(f"Incorrect arguments to monarch operation {name}: a local tensor "
                            "is passed to a remote function; make it on the mesh")
        ambient = active_mesh()
        if ambient is None:
            raise ValueError("Calling a 'remote' monarch function requires an active proc_mesh "
                             "(`with proc_mesh.activate():`)")
        mesh = _mesh_of(tensors, ambient, name)
        stream = active_stream()
        _check(name, tensors, [], stream)
        spec, leaves, mutated_at = self._propagation(args, kwargs, tensors, (akey, kkey),
                                                     mesh, wargs, wkwargs)
        mutated = [tensors[i] for i in mutated_at]
        _check(name, tensors, mutated, stream)
        results, outs = _results(leaves, tensors, mesh, stream)
        engine = mesh._engine
        engine.record(mesh._view, (CALL, engine.next_seq(), stream._wire, self._remote_impl,
                                   wargs, wkwargs, outs, [t.ref for t in mutated]))
        return pytree.tree_unflatten(results, spec)

    def _propagation(self, args: Any, kwargs: Any, tensors: list[Tensor], key: Any, mesh: Any,
                     wargs: Any, wkwargs: Any) -> tuple[Any, tuple, list[int]]:
        try:
            hit = self._cache.get(key)
        except TypeError:
            key, hit = None, None
        if hit is not None:
            return hit
        propagate = self._propagate
        if propagate == "inspect":
            answer: Any = (pytree.tree_flatten(None)[1], (), [])
        elif propagate is None or propagate == "cached":
            answer = self._probe(mesh, wargs, wkwargs, tensors)
        elif propagate == "mocked":
            raise NotImplementedError("mocked propagation")
        else:
            answer = _fake_propagation(propagate, args, kwargs, tensors)
        if key is not None:
            self._cache[key] = answer
        return answer

    def _probe(self, mesh: Any, wargs: Any, wkwargs: Any,
               tensors: list[Tensor]) -> tuple[Any, tuple, list[int]]:
        engine = mesh._engine
        streams = [t.stream._wire for t in tensors] or [active_stream()._wire]
        answer = engine.call_rank(mesh._view.rank_at(0), "probe", self._remote_impl, wargs,
                                  wkwargs, streams).get()
        if isinstance(answer, Failure):
            raise remote_exception(engine, answer)
        shaped, mutated = answer
        leaves, spec = pytree.tree_flatten(shaped)
        described = tuple(leaf.describe if isinstance(leaf, Placeholder) else (_meta.VALUE, leaf)
                          for leaf in leaves)
        return spec, described, mutated

    def __repr__(self) -> str:
        return f"monarch.remote({self._remote_impl!r})"


def _fake_propagation(propagate: Callable[..., Any], args: Any, kwargs: Any,
                      tensors: list[Tensor]) -> tuple[Any, tuple, list[int]]:
    fakes = _meta.fakes_for([t._meta for t in tensors], [t._aliases for t in tensors])
    by_id = {id(t): f for t, f in zip(tensors, fakes)}
    fargs, fkwargs = pytree.tree_map(
        lambda x: by_id.get(id(x), x) if isinstance(x, torch.Tensor) else x, (args, kwargs))
    versions = [f._version for f in fakes]
    with _meta.fake_mode():
        result = propagate(*fargs, **fkwargs)
    mutated = [i for i, (f, v) in enumerate(zip(fakes, versions)) if f._version != v]
    spec, leaves = _meta.describe(result, fakes)
    return spec, leaves, mutated


def remote(function: Any = None, *, propagate: Any = None) -> Any:
    """Makes `function` (a callable, or an import path "module.name") callable on remote
    tensors; usable as `@remote` or `@remote(propagate=...)`."""
    if function is None:
        return functools.partial(remote, propagate=propagate)
    return Remote(function, propagate)
