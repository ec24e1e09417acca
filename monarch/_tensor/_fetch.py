"""Bringing remote values back: fetch_shard, inspect, show, call_on_shard_and_fetch.

A fetch is a `call` to every worker of the tensor's mesh, after every recorded op: the chosen
proc answers the values, every proc answers the first failure among the fetched tensors, so
an error anywhere in what the values depend on surfaces here, as a RemoteException carrying
the worker's traceback and where the failing op was made in the controller.
"""

from __future__ import annotations

import traceback
from typing import Any, TypeVar

import torch
from torch.utils import _pytree as pytree

from .._runtime._future import Future
from ._dispatch import _scan
from ._engine import Engine
from ._mesh import DeviceMesh, active_mesh, no_mesh
from ._ops import Failure
from ._proxy import Tensor
from ._stream import active_stream

T = TypeVar("T")


class RemoteException(Exception):
    """A remote op failed (asynchronously): raised by the next fetch of anything depending on
    it. `worker_error_string` is the worker's traceback, `controller_frames` where the failing
    op was made here, `rank` the proc (base rank) where it failed."""

    def __init__(self, worker_error_string: str, controller_frames: list[Any],
                 rank: int) -> None:
        super().__init__(worker_error_string)
        self.worker_error_string = worker_error_string
        self.controller_frames = controller_frames
        self.rank = rank

    def __str__(self) -> str:
        controller_tb = "".join(traceback.format_list(self.controller_frames))
        return (f"A remote function has failed asynchronously on rank {self.rank}.\n"
                "Traceback of where the remote function was issued on controller "
                f"(most recent call last):\n{controller_tb}"
                f"Error as reported from worker:\n{self.worker_error_string}")


def fetch_shard(obj: T, shard: dict[str, int] | None = None, **kwargs: int) -> Future[T]:
    """A future of `obj` (a pytree) with each remote tensor replaced by its value on one proc:
    the one at `shard` (every dimension named; default: the first proc of the mesh)."""
    if kwargs:
        shard = {**(shard or {}), **kwargs}
    leaves, spec = pytree.tree_flatten(obj)
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)]
    if not positions:
        done: Future[T] = Future._pending()
        done.set_result(obj)
        return done
    tensors: list[Tensor] = [leaves[i] for i in positions]
    mesh = _common_mesh(tensors)
    for t in tensors:
        if t.ref is None:
            raise TypeError("fetch_shard: a tensor was dropped (t.drop()) and cannot be fetched")
    chosen = _chosen(mesh, shard)
    engine = mesh._engine
    answers = engine.fetch(mesh._view, [t.ref for t in tensors],  # type: ignore[misc]
                           [t.stream._wire for t in tensors], chosen)

    def assemble(value_mesh: Any) -> T:
        values = None
        for failure, found in value_mesh.values():
            if failure is not None:
                raise remote_exception(engine, failure)
            if found is not None:
                values = found
        assert values is not None
        out = list(leaves)
        for i, v in zip(positions, values):
            out[i] = v
        return pytree.tree_unflatten(out, spec)

    return _decoded(answers, assemble)


def inspect(obj: T, shard: dict[str, int] | None = None, **kwargs: int) -> T:
    """`fetch_shard(obj, shard, **kwargs).result()`: the values, here."""
    return fetch_shard(obj, shard, **kwargs).result()


def show(obj: Any, shard: dict[str, int] | None = None, **kwargs: int) -> None:
    """Prints the fetched values as plain text (tensors of up to 3 dimensions as grids)."""
    from ._table import render

    value = inspect(obj, shard, **kwargs)
    with no_mesh.activate():
        print(render(value))


def call_on_shard_and_fetch(remote: Any, *args: Any, shard: dict[str, int] | None = None,
                            **kwargs: Any) -> Future[Any]:
    """Runs the remote function on one proc (at `shard`) with the local values of its remote
    tensor arguments, after every recorded op, and returns a future of its result."""
    tensors: list[Tensor] = []
    local: list[torch.Tensor] = []
    wargs, _ = _scan(args, tensors, local)
    wkwargs, _ = _scan(kwargs, tensors, local)
    if local:
        raise TypeError("call_on_shard_and_fetch: local tensors cannot be mixed with remote "
                        "ones")
    mesh = _common_mesh(tensors) if tensors else active_mesh()
    if mesh is None:
        raise ValueError("Calling a 'remote' monarch function requires an active proc_mesh "
                         "(`with proc_mesh.activate():`)")
    engine = mesh._engine
    streams = [t.stream._wire for t in tensors] or [active_stream()._wire]
    answer = engine.call_rank(_chosen(mesh, shard), "call_value", remote._target(), wargs,
                              wkwargs, streams)

    def check(value: Any) -> Any:
        if isinstance(value, Failure):
            raise remote_exception(engine, value)
        return value

    return _decoded(answer, check)


def _decoded(source: Future[Any], transform: Any) -> Future[Any]:
    """A future of `transform(value of source)`, with the value decoded (unpickled) outside
    any dispatch mode: fetched tensors are local, even inside `activate()`."""
    from torch.utils._python_dispatch import _disable_current_modes

    def value() -> Any:
        with _disable_current_modes():
            return transform(source._resolve())

    out: Future[Any] = Future._pending()
    source.add_done_callback(lambda: out.set_lazy(value, fails=source.failed()))
    return out


def remote_exception(engine: Engine, failure: Failure) -> RemoteException:
    """The RemoteException of a worker Failure (asking its origin for the text it lacks)."""
    text = failure.text
    if not text and failure.seq:
        full = engine.call_rank(failure.rank, "failure", failure.seq).get()
        text = full.text if full is not None else "(the failing worker no longer has the error)"
    frames = [traceback.FrameSummary(name, line, func)
              for name, line, func in reversed(engine.frames_of(failure.seq))]
    return RemoteException(text, frames, failure.rank)


def _common_mesh(tensors: list[Tensor]) -> DeviceMesh:
    mesh = tensors[0].mesh
    for t in tensors:
        if t.mesh != mesh:
            raise TypeError(f"fetching tensors of different meshes at once ({mesh!r} and "
                            f"{t.mesh!r}): fetch them separately")
    return mesh


def _chosen(mesh: DeviceMesh, shard: dict[str, int] | None) -> int:
    view = mesh._view
    if shard is None:
        return view.rank_at(0)
    extra = [k for k in shard if k not in view.labels]
    if extra:
        raise KeyError(f"{extra}")
    for name in view.labels:
        if name not in shard:
            raise ValueError(f"Missing key '{name}' in shard map. Need all of {view.labels}")
    return view.rank_of(shard)


__all__ = ["RemoteException", "call_on_shard_and_fetch", "fetch_shard", "inspect", "no_mesh",
           "show"]
