"""Output metadata of ops on remote tensors, computed without data and cached.

The controller never holds remote values, only their metadata (shape, strides, storage offset,
dtype, device). To learn what an op returns it runs the op on fake tensors (torch's
FakeTensorMode: real kernels' shape logic, no memory), and since the same op on inputs of the
same metadata always returns outputs of the same metadata, it caches the answer by signature:
a hit costs a dict lookup (~3 µs here) where FakeTensorMode costs 100-400 µs per op.

A cached answer is a pytree spec and one descriptor per leaf:
    (SAME, i)        the i-th input tensor itself (in-place ops, `out=`)
    (VIEW, i, meta)  a new tensor sharing the i-th input's storage (views)
    (NEW, meta)      a new tensor
    (VALUE, v)       a value that is not a tensor
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import torch
from torch.utils import _pytree as pytree

Meta = tuple  # (size, stride, storage_offset, dtype, device)
SAME, VIEW, NEW, VALUE = range(4)

_cache: dict[Any, tuple[Any, tuple[tuple[Any, ...], ...]]] = {}
_CACHE_LIMIT = 50_000


class DataDependentError(TypeError):
    """An op whose output shape depends on tensor values (nonzero, unique, masked_select...):
    the controller cannot know it without the data. Fetch the value and compute locally."""


@functools.cache
def fake_mode() -> Any:
    """The controller's FakeTensorMode (made on first use)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # A shape error is raised to the caller as a local torch op would raise it; torch's own
    # ERROR log of the failed meta kernel would only repeat it.
    logging.getLogger("torch._subclasses.fake_tensor").addFilter(
        lambda record: "failed while attempting to run meta" not in record.getMessage())
    return FakeTensorMode(allow_non_fake_inputs=False)


def meta_of(t: torch.Tensor) -> Meta:
    """The metadata tuple of a (fake or real) tensor."""
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device)


def fakes_for(metas: Sequence[Meta], groups: Sequence[object]) -> list[torch.Tensor]:
    """Fake tensors with these metadata; inputs of the same alias group share one storage."""
    needed: dict[int, int] = {}
    for meta, group in zip(metas, groups):
        needed[id(group)] = max(needed.get(id(group), 0), _extent(meta))
    out = []
    with fake_mode():
        bases: dict[int, torch.Tensor] = {}
        for (size, stride, offset, dtype, device), group in zip(metas, groups):
            base = bases.get(id(group))
            if base is None or base.dtype != dtype or base.device != device:
                base = torch.empty(needed[id(group)], dtype=dtype, device=device)
                bases[id(group)] = base
            out.append(base.as_strided(size, stride, offset))
    return out


def _extent(meta: Meta) -> int:
    size, stride, offset = meta[0], meta[1], meta[2]
    if any(s == 0 for s in size):
        return offset
    return offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))


def propagate(func: Callable[..., Any], key: Any, args: Any, kwargs: Any,
              tensors: Sequence[Any]) -> tuple[Any, tuple[tuple[Any, ...], ...]]:
    """The (spec, leaf descriptors) of `func(*args, **kwargs)`, from the cache or computed.

    `tensors` are the remote tensors in `args`/`kwargs`, in scanning order; `key` their
    signature (None when some argument is not hashable: computed, not cached).
    """
    if key is not None:
        try:
            hit = _cache.get(key)
        except TypeError:
            key, hit = None, None
        if hit is not None:
            return hit
    answer = compute(func, args, kwargs, tensors)
    if key is not None:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = answer
    return answer


def compute(func: Callable[..., Any], args: Any, kwargs: Any,
            tensors: Sequence[Any]) -> tuple[Any, tuple[tuple[Any, ...], ...]]:
    """Runs `func` on fakes of `tensors` and describes its result (see the module docstring)."""
    fakes = fakes_for([t._meta for t in tensors], [t._aliases for t in tensors])
    by_id = {id(t): f for t, f in zip(tensors, fakes)}

    fargs, fkwargs = pytree.tree_map(lambda x: by_id.get(id(x), x), (args, kwargs))
    try:
        with fake_mode():
            result = func(*fargs, **fkwargs)
    except Exception as exc:
        if type(exc).__name__ in ("DynamicOutputShapeException", "DataDependentOutputException",
                                  "GuardOnDataDependentSymNode"):
            raise DataDependentError(
                f"{func} has an output that depends on tensor values, which the controller "
                "does not have: fetch the value (monarch.inspect) and compute locally") from exc
        raise
    return describe(result, fakes)


def describe(result: Any, fakes: Sequence[torch.Tensor]) -> tuple[Any, tuple[tuple[Any, ...], ...]]:
    """The (spec, leaf descriptors) of a fake `result` computed from `fakes`."""
    leaves, spec = pytree.tree_flatten(result)
    storages: dict[int, int] = {}
    for i, f in enumerate(fakes):
        storages.setdefault(f.untyped_storage()._cdata, i)
    out: list[tuple[Any, ...]] = []
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            out.append((VALUE, leaf))
            continue
        same = next((i for i, f in enumerate(fakes) if f is leaf), None)
        if same is not None:
            out.append((SAME, same))
            continue
        source = storages.get(leaf.untyped_storage()._cdata)
        meta = meta_of(leaf)
        out.append((NEW, meta) if source is None else (VIEW, source, meta))
    return spec, tuple(out)
