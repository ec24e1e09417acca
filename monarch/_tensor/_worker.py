"""The worker: one actor per proc that runs a tensor engine's ops on real tensors.

It keeps a table from ref ids to local tensors. `execute` runs a batch: ops of the main stream
on the actor's thread, ops of other streams on a thread per stream. An op whose input is a
Failure is not run: its outputs (and what it would write) become that Failure; an op that
raises leaves a new Failure (seq, rank, traceback) in their place. Nothing escapes `execute`
(an exception out of a broadcast endpoint would fail the actor), so the worker and every op
not depending on a failure go on. Each batch is a telemetry span (mesh, ops, bytes moved).
"""

from __future__ import annotations

import collections
import importlib
import queue
import threading
import traceback
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from ..telemetry import start_span
from .._actors._actor import Actor
from .._runtime._context import context
from .._actors._endpoint import endpoint
from .._geometry._view import View
from . import _ops
from ._groups import Groups
from ._ops import MAIN_STREAM, Failure, Placeholder, Ref

FAILURES_KEPT = 1000


class _Poisoned(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


class TensorWorker(Actor):
    """Runs the ops of one tensor engine in one proc (spawned by the controller's Engine)."""

    def __init__(self, engine: str, full: tuple, store_path: str, threads: int) -> None:
        torch.set_num_threads(threads)
        index = context().actor_instance.rank.rank
        self.rank = View.from_wire(full).rank_at(index)
        _pin_cuda_device(View.from_wire(full), index)
        self.name = context().actor_instance.proc_id
        self.table: dict[int, Any] = {}
        self.groups = Groups(engine, store_path, self.rank, self.name)
        self._views: dict[tuple, tuple[View, tuple[int, ...] | None]] = {}
        self._funcs: dict[str, Callable[..., Any]] = {}
        self._streams: dict[str, _StreamThread] = {}
        self._borrows: dict[int, tuple[threading.Event, threading.Event]] = {}
        self._handoffs: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._lock = threading.Lock()
        self._failures: collections.OrderedDict[int, Failure] = collections.OrderedDict()
        self._handlers: dict[int, Callable[..., int]] = {
            _ops.OP: self._op, _ops.CALL: self._call, _ops.CONST: self._const,
            _ops.DELETE: self._delete, _ops.RANK: self._rank, _ops.REDUCE: self._reduce,
            _ops.MOVE: self._move, _ops.BORROW: self._borrow}

    # -- endpoints ------------------------------------------------------------------------------
    @endpoint
    def execute(self, view: tuple, ops: list) -> None:
        """Runs a batch (see monarch._tensor._ops). Never raises."""
        try:
            self._execute(view, ops)
        except BaseException:  # noqa: BLE001 - a bug here must not fail the actor
            traceback.print_exc()

    @endpoint
    def fetch(self, refs: list[int], streams: list[str], chosen: int) -> tuple[Any, Any]:
        """(first Failure among `refs` or None, their values if this is base rank `chosen`)."""
        self._sync(streams)
        values = [self.table.get(r, _MISSING) for r in refs]
        for value in values:
            if value is _MISSING:
                return Failure(0, self.rank, "internal error: a fetched tensor is unknown to "
                                             "the worker"), None
            if isinstance(value, Failure):
                return value, None
        if self.rank != chosen:
            return None, None
        return None, [_to_controller(v) for v in values]

    @endpoint
    def call_value(self, function: Any, args: Any, kwargs: Any, streams: list[str]) -> Any:
        """Runs `function` on this proc's tensors and returns its result (or a Failure)."""
        self._sync(streams)
        try:
            a, k = self._resolve(args), self._resolve(kwargs)
            result = _resolve_function(function)(*a, **k)
        except _Poisoned as poisoned:
            return poisoned.failure
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            return self._failure(0, exc)
        return pytree.tree_map(lambda v: _to_controller(v) if isinstance(v, torch.Tensor)
                               else v, result)

    @endpoint
    def probe(self, function: Any, args: Any, kwargs: Any, streams: list[str]) -> Any:
        """Runs `function` once here and describes its result: (the result with each tensor
        replaced by a Placeholder of its metadata, indices of the inputs it wrote)."""
        from ._meta import VALUE, describe

        self._sync(streams)
        try:
            a, k = self._resolve(args), self._resolve(kwargs)
            inputs = [v for v in pytree.tree_leaves((a, k)) if isinstance(v, torch.Tensor)]
            versions = [v._version for v in inputs]
            result = _resolve_function(function)(*a, **k)
        except _Poisoned as poisoned:
            return poisoned.failure
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            return self._failure(0, exc)
        spec, leaves = describe(result, inputs)
        shaped = pytree.tree_unflatten(
            [Placeholder(leaf) if leaf[0] != VALUE else leaf[1] for leaf in leaves], spec)
        return shaped, [i for i, (v, n) in enumerate(zip(inputs, versions)) if v._version != n]

    @endpoint
    def failure(self, seq: int) -> Failure | None:
        """The full Failure of op `seq` if it failed here (others hold it without its text)."""
        return self._failures.get(seq)

    @endpoint
    def live_refs(self) -> int:
        """How many remote tensors this worker holds (for tests and diagnostics)."""
        return len(self.table)

    # -- batches --------------------------------------------------------------------------------
    def _execute(self, view_wire: tuple, ops: list) -> None:
        place = self._views.get(view_wire)
        if place is None:
            view = View.from_wire(view_wire)
            try:
                coords: tuple[int, ...] | None = view.coords(view.index_of(self.rank))
            except ValueError:
                coords = None
            place = self._views[view_wire] = (view, coords)
        span = start_span("tensor_engine batch", attributes={
            "mesh": "tensor_engine", "rank": self.rank, "device_mesh": str(place[0].extent),
            "ops": len(ops), "proc": self.name})
        moved = 0
        with torch.no_grad():
            for op in ops:
                for stream, part in self._route(op):
                    if stream == MAIN_STREAM:
                        moved += self._run(part, place)
                    else:
                        self._stream(stream).put(part, place)
        span.end("ok", {"bytes_moved": moved})

    def _route(self, op: tuple) -> list[tuple[str, tuple]]:
        """The (stream, op) pairs to run: a to_mesh sends on its source stream and receives
        on its destination stream; every other op runs on its own stream."""
        if op[0] != _ops.MOVE:
            return [(op[2], op)]
        from_stream, to_stream = op[2], op[8]
        sends = _member(View.from_wire(op[5]), self.rank)
        receives = _member(View.from_wire(op[6]), self.rank)
        if sends and receives and from_stream == to_stream:
            return [(from_stream, op + ("both",))]
        parts = []
        if sends:
            parts.append((from_stream, op + ("send",)))
        if receives:
            parts.append((to_stream, op + ("receive",)))
        return parts

    def _run(self, op: tuple, place: tuple) -> int:
        try:
            return self._handlers[op[0]](op, place)
        except Exception as exc:  # noqa: BLE001 - a worker bug becomes the op's failure
            failure = self._failure(op[1], exc)
            for ref in _outputs(op):
                self.table[ref] = failure
            return 0

    def _stream(self, name: str) -> "_StreamThread":
        thread = self._streams.get(name)
        if thread is None:
            thread = self._streams[name] = _StreamThread(name, self._run)
        return thread

    def _sync(self, streams: list[str]) -> None:
        for name in set(streams):
            if name != MAIN_STREAM and name in self._streams:
                self._streams[name].sync()

    # -- ops ------------------------------------------------------------------------------------
    def _op(self, op: tuple, place: tuple) -> int:
        _, seq, _, name, args, kwargs, outs, mutated = op
        func = self._funcs.get(name)
        if func is None:
            func = self._funcs[name] = _aten(name)
        self._apply(seq, func, args, kwargs, outs, mutated)
        return 0

    def _call(self, op: tuple, place: tuple) -> int:
        _, seq, _, function, args, kwargs, outs, mutated = op
        self._apply(seq, _resolve_function(function), args, kwargs, outs, mutated)
        return 0

    def _apply(self, seq: int, func: Callable[..., Any], args: Any, kwargs: Any,
               outs: list[int], mutated: list[int]) -> None:
        try:
            a, k = self._resolve(args), self._resolve(kwargs)
            result = func(*a, **k)
        except _Poisoned as poisoned:
            return self._fail(poisoned.failure, outs, mutated)
        except Exception as exc:  # noqa: BLE001 - the op's failure, reported at fetch
            return self._fail(self._failure(seq, exc), outs, mutated)
        leaves = [v for v in pytree.tree_leaves(result) if isinstance(v, torch.Tensor)]
        if len(leaves) != len(outs):
            error = TypeError(f"the function returned {len(leaves)} tensors where its "
                              f"propagation said {len(outs)}")
            return self._fail(self._failure(seq, error), outs, mutated)
        table = self.table
        for ref, value in zip(outs, leaves):
            table[ref] = value
        return None

    def _fail(self, failure: Failure, outs: list[int], mutated: list[int]) -> None:
        for ref in outs:
            self.table[ref] = failure
        for ref in mutated:
            self.table[ref] = failure

    def _resolve(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is Ref:
            value = self.table[obj.id]
            if type(value) is Failure:
                raise _Poisoned(value)
            return value
        if kind is list or kind is tuple:
            resolved = [self._resolve(x) for x in obj]
            return resolved if kind is list else tuple(resolved)
        if kind is dict:
            return {k: self._resolve(v) for k, v in obj.items()}
        return obj

    def _const(self, op: tuple, place: tuple) -> int:
        self.table[op[4]] = op[3]
        return 0

    def _delete(self, op: tuple, place: tuple) -> int:
        table = self.table
        for ref in op[3]:
            table.pop(ref, None)
        return 0

    def _rank(self, op: tuple, place: tuple) -> int:
        view, coords = place
        value = 0
        for name in op[4]:
            axis = view.labels.index(name)
            value = value * view.sizes[axis] + coords[axis]
        self.table[op[3]] = torch.tensor(value, dtype=torch.int64)
        return 0

    def _reduce(self, op: tuple, place: tuple) -> int:
        _, seq, stream, src, out, dims, reduction, scatter, mode, spec = op
        view, coords = place
        value = self._operand(seq, src)
        target = self.table.get(out) if mode == 2 else None
        result, moved = self.groups.reduce(view, coords, value, dims, reduction, scatter, mode,
                                           spec, stream, target)
        self.table[out] = result
        return moved

    def _move(self, op: tuple, place: tuple) -> int:
        _, seq, from_stream, src, out, src_wire, dst_wire, spec, to_stream, role = op
        src_view, dst_view = View.from_wire(src_wire), View.from_wire(dst_wire)
        sends, receives = role in ("both", "send"), role in ("both", "receive")
        value = self._operand(seq, src) if sends else None
        received, moved = self.groups.move(seq, value, src_view, dst_view, spec, sends, receives,
                                           self._handoff(seq))
        if receives:
            self.table[out] = received
        return moved

    def _operand(self, seq: int, ref: int) -> Any:
        """The input of a collective: a tensor or a Failure, never missing (the other procs
        wait for this one to take part)."""
        value = self.table.get(ref)
        if value is None:
            return Failure(seq, self.rank, f"internal error: tensor {ref} is unknown here")
        return value

    def _handoff(self, seq: int) -> Callable[[Any], Any]:
        with self._lock:
            slot = self._handoffs.setdefault(seq, (threading.Event(), []))

        def handoff(value: Any) -> Any:
            event, box = slot
            if value is not None:
                box.append(value)
                event.set()
                return None
            event.wait()
            with self._lock:
                self._handoffs.pop(seq, None)
            return box[0]

        return handoff

    def _borrow(self, op: tuple, place: tuple) -> int:
        _, seq, stream, step, borrow, src, out = op
        with self._lock:
            created, last_used = self._borrows.setdefault(
                borrow, (threading.Event(), threading.Event()))
        if step == _ops.CREATE:
            self.table[out] = self.table.get(src)
            created.set()
        elif step == _ops.FIRST_USE:
            created.wait()
        elif step == _ops.LAST_USE:
            last_used.set()
        else:
            last_used.wait()
            with self._lock:
                self._borrows.pop(borrow, None)
        return 0

    def _failure(self, seq: int, exc: BaseException) -> Failure:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        failure = Failure(seq, self.rank, text)
        self._failures[seq] = failure
        if len(self._failures) > FAILURES_KEPT:
            self._failures.popitem(last=False)
        return failure

    def __cleanup__(self, exc: Any) -> None:
        for thread in self._streams.values():
            thread.stop()


class _StreamThread:
    """The thread running one stream's ops on a worker, in order."""

    def __init__(self, name: str, run: Callable[[tuple, tuple], int]) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._run = run
        self._thread = threading.Thread(target=self._loop, name=f"stream {name}", daemon=True)
        self._thread.start()

    def put(self, op: tuple, place: tuple) -> None:
        self._queue.put((op, place))

    def sync(self) -> None:
        """Waits until every op put before this call has run."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()

    def stop(self) -> None:
        self._queue.put(None)

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            self._run(*item)


_MISSING = object()


def _member(view: View, rank: int) -> bool:
    try:
        view.index_of(rank)
    except ValueError:
        return False
    return True


def _outputs(op: tuple) -> list[int]:
    kind = op[0]
    if kind in (_ops.OP, _ops.CALL):
        return list(op[6]) + list(op[7])
    if kind == _ops.CONST:
        return [op[4]]
    if kind == _ops.RANK:
        return [op[3]]
    if kind in (_ops.REDUCE, _ops.MOVE):
        return [op[4]]
    return []


def _pin_cuda_device(full: View, index: int) -> None:
    """One GPU per proc, as in Monarch: the proc's coordinate along its `gpus`/`gpu` dimension
    (else its index) picks the current CUDA device. Nothing happens without CUDA."""
    if not torch.cuda.is_available():
        return
    coords = dict(zip(full.labels, full.coords(index)))
    local = next((coords[d] for d in ("gpus", "gpu") if d in coords), index)
    torch.cuda.set_device(local % torch.cuda.device_count())


def _aten(name: str) -> Callable[..., Any]:
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def _resolve_function(function: Any) -> Callable[..., Any]:
    if isinstance(function, str):
        module, _, attr = function.rpartition(".")
        found = getattr(importlib.import_module(module), attr)
        return getattr(found, "_remote_impl", found)
    return function


def _to_controller(value: torch.Tensor) -> torch.Tensor:
    """A tensor as the controller receives it: on CPU, holding only its own bytes."""
    value = value.detach()
    if value.device.type != "cpu":
        return value.cpu()
    if (not value.is_contiguous()
            or value.untyped_storage().nbytes() != value.numel() * value.element_size()):
        return value.clone(memory_format=torch.contiguous_format)
    return value

