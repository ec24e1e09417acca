"""ActorMesh: a picklable reference to the actors of one spawn, or to a slice of them.

A reference is plain data (ids, a View over the proc mesh's base ranks, the procs' addresses),
so it can be passed to other actors, which then call the mesh directly. Every adverb sends one
message to the first rank of the view; the procs fan it out (see `_process`).
"""

from __future__ import annotations

import functools
import json
import random
from typing import Any, Generic, TypeVar

from .._runtime import _context, _instrument, _process_runtime as _process
from .. import config, telemetry
from .._actors._adverbs import EACH_VALUE, NOTHING, VALUE_MESH, Adverb
from .._actors._endpoint import ActorEndpoint, NotAnEndpoint
from .._runtime._agent_calls import current_runtime
from .._runtime._errors import SupervisionError, UnpicklableError, actor_failure_report
from .._runtime._future import Future, resolved
from .._runtime._recipients import Recipients
from .._geometry._onview import OnView
from .._runtime._ports import CallInfo, CallSink, OneSink, StreamSink, supervision_error
from .._geometry._view import View
from .._geometry._value_mesh import ValueMesh
from .._wire import _serial
from .._wire._transport import PeerGone
from ._system_calls import ping_actors, stop_actors

A = TypeVar("A")


class ActorMesh(OnView, Generic[A]):
    """The actors spawned by `ProcMesh.spawn`, or a slice of them.

    Endpoints are attributes: `mesh.step.call(...)`. Slicing (`slice`, `flatten`, `rename`,
    `split`) returns another reference to some of the same actors.
    """

    def __init__(self, *, mesh_id: str, name: str, class_name: str, endpoints: frozenset[str],
                 methods: frozenset[str], procs: str, table: tuple[str, ...], full: View,
                 view: View, owner_id: str, owner_label: str = "<root>") -> None:
        self._mesh_id = mesh_id
        self._mesh_name = name
        self._class_name = class_name
        self._endpoints = endpoints
        self._methods = methods
        self._procs = procs
        self._table = table
        self._full = full
        self._view = view
        self._owner_id = owner_id
        self._owner_label = owner_label
        self._ranks = view.ranks()
        self._addresses = tuple(table[r] for r in self._ranks)
        # every actor of the mesh (a view's ranks are distinct and within the full view's)
        self._whole = view is full or len(self._ranks) == len(full.ranks())

    # -- endpoints -------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._endpoints:
            endpoint: ActorEndpoint[Any, Any] = ActorEndpoint(self, name)
            self.__dict__[name] = endpoint
            return endpoint
        if name in self._methods:
            return NotAnEndpoint(self, name)
        raise AttributeError(f"{self._mesh_name} ({self._class_name}) has no endpoint {name!r};"
                             f" its endpoints: {', '.join(sorted(self._endpoints)) or 'none'}")

    def _send(self, method: str, args: tuple, kwargs: dict, adverb: Adverb,
              port: Any = None) -> Any:
        if adverb.single and len(self._ranks) != 1:
            raise ValueError(
                f"call_one requires exactly 1 actor, but mesh has {len(self._ranks)}")
        if adverb.picks is not None:
            return self._chosen()._send(method, args, kwargs, adverb.picks, port)
        runtime = _process.current() or current_runtime()
        sender = _context.context().actor_instance._sender
        frames = _pack(args, kwargs, self._mesh_name, method)
        info = CallInfo(self._mesh_name, method, self._label_at)
        span = telemetry.begin_call(self._mesh_name, method, adverb.name,
                                    (self._mesh_id, sender, self._view_json)) \
            if _instrument.ENABLED else None
        trace = span[1:3] if span is not None else None
        answers = adverb.answers
        if answers is NOTHING:
            reply_to = None if port is None else (port._address, port._port_id)
            refused = self._refusal(runtime)
            if refused is None:
                self._cast(runtime, sender, method, frames, reply_to, trace)
            if span is not None:
                telemetry.end_call(span, "ok" if refused is None else "error")
            return None
        future: Future[Any] = Future._pending()
        futures: list[Future[Any]] = []
        if answers is EACH_VALUE:
            futures = [Future._pending() for _ in self._ranks]
            sink: Any = StreamSink(futures, self._addresses, info)
        elif answers is VALUE_MESH:
            extent = self._view.extent
            sink = CallSink(future, self._addresses, info,
                            lambda values: ValueMesh(extent, values))
        else:
            sink = OneSink(future, self._addresses[0], info)
        refused = self._refusal(runtime)
        if refused is not None:
            index, report = refused
            error = supervision_error(info, report)
            for fut in futures or [future]:
                fut.set_exception(error)
            if span is not None:
                telemetry.end_call(span, "error")
        else:
            port_id = runtime.new_port(sink)
            (futures[-1] if futures else future)._span = span  # ended when it settles
            try:
                self._cast(runtime, sender, method, frames, (runtime.address, port_id), trace)
            except PeerGone as exc:
                runtime.drop_port(port_id)
                sink.fail(self._addresses[0],
                          runtime.dead.get(self._addresses[0]) or exc.reason or "gone", None)
        return futures if answers is EACH_VALUE else future

    def _cast(self, runtime: Any, sender: str, method: str, frames: list[Any],
              port: tuple | None, trace: tuple | None = None) -> None:
        runtime.cast(sender, self._recipients, method, frames, port, trace,
                     hold=len(self._ranks) > 1 and _context.holds_calls())

    @functools.cached_property
    def _recipients(self) -> Recipients:
        """Where its calls go (made once per mesh object)."""
        return Recipients(self._mesh_id, self._procs, self._table, self._view, self._ranks,
                          self._whole)

    def _refusal(self, runtime: Any) -> tuple[int, str] | None:
        """(index, report) of the first rank known to have failed, if any."""
        if runtime.dead:
            for i, address in enumerate(self._addresses):
                reason = runtime.dead.get(address)
                if reason is not None:
                    return i, self._report(i, reason)
        if runtime.failed_actors:
            for i, rank in enumerate(self._ranks):
                report = runtime.failed_actors.get((self._mesh_id, rank))
                if report is not None:
                    return i, report
        return None

    def _label_at(self, index: int) -> str:
        point = self._full.point(self._full.index_of(self._ranks[index]))
        return f"{self._owner_label}.<{self._class_name} {self._mesh_name}{point!r}>"

    def _report(self, index: int, reason: str) -> str:
        return actor_failure_report(self._label_at(index), reason)

    def _chosen(self) -> "ActorMesh[A]":
        index = random.randrange(len(self._ranks))
        coords = self._view.point(index)
        return self._with(self._view.slice(**dict(coords)))

    # -- geometry --------------------------------------------------------------------------
    @functools.cached_property
    def _view_json(self) -> str:
        """The view calls are cast to, as Monarch's region JSON (`sent_messages.view_json`)."""
        view = self._view
        return json.dumps({"labels": list(view.labels), "slice": {
            "offset": view.offset, "sizes": list(view.sizes), "strides": list(view.strides)}},
            separators=(",", ":"))

    def _with(self, view: View) -> "ActorMesh[A]":
        return ActorMesh(mesh_id=self._mesh_id, name=self._mesh_name, class_name=self._class_name,
                         endpoints=self._endpoints, methods=self._methods, procs=self._procs,
                         table=self._table, full=self._full, view=view,
                         owner_id=self._owner_id, owner_label=self._owner_label)

    @property
    def _name(self) -> Future[str]:
        """A future of the mesh's id (`<name>-<suffix>`), as Monarch's `ActorMesh._name`."""
        return resolved(self._mesh_id)

    # -- lifecycle -------------------------------------------------------------------------
    _stop_requested = False
    _STOP_ORDER = 0
    """An owner stops its actor meshes before its proc meshes (`ActorSlot.stop_descendants`)."""

    def stop(self, reason: str = "actor was stopped") -> Future[None]:
        """Stops these actors (after `__cleanup__`); later calls raise SupervisionError."""
        self._stop_requested = True
        return stop_actors(self, reason)

    def _stopped(self) -> bool:
        """True once `stop()` was called on it, or every proc it runs on has ended."""
        runtime = _process.current()
        return self._stop_requested or (runtime is not None and bool(runtime.dead) and all(
            address in runtime.dead for address in self._addresses))

    @property
    def initialized(self) -> Future[None]:
        """A future settled once every actor has run `__init__`."""
        return ping_actors(self)

    def __reduce__(self) -> Any:
        return _rebuild, (self._mesh_id, self._mesh_name, self._class_name, tuple(self._endpoints),
                          tuple(self._methods), self._procs, self._table, self._full.to_wire(),
                          self._view.to_wire(), self._owner_id, self._owner_label)

    def __repr__(self) -> str:
        module, _, qual = self._class_name.rpartition(".")
        shape = ",".join(f"{k}={v}" for k, v in self.sizes.items())
        return f"ActorMesh(class=<class '{self._class_name}'>, shape={{{shape}}})"


def _rebuild(mesh_id: str, name: str, class_name: str, endpoints: tuple, methods: tuple,
             procs: str, table: tuple, full: tuple, view: tuple, owner_id: str,
             owner_label: str = "<root>") -> ActorMesh[Any]:
    return ActorMesh(mesh_id=mesh_id, name=name, class_name=class_name,
                     endpoints=frozenset(endpoints), methods=frozenset(methods), procs=procs,
                     table=tuple(table), full=View.from_wire(full), view=View.from_wire(view),
                     owner_id=owner_id, owner_label=owner_label)


def _pack(args: tuple, kwargs: dict, mesh_name: str, method: str) -> list[Any]:
    if not args and not kwargs:
        return []
    try:
        data, buffers = _serial.dumps((args, kwargs))
    except Exception as exc:
        raise UnpicklableError(f"could not pickle the arguments of {mesh_name}.{method}: "
                               f"{type(exc).__name__}: {exc}") from exc
    size = len(data) + sum(memoryview(b).nbytes for b in buffers)
    limit = config.get("codec_max_frame_length")
    if size > limit:
        # as Monarch's: the frame cannot be delivered, which the caller hears as supervision
        raise SupervisionError(f"Endpoint call {mesh_name}.{method}() failed, the message is "
                               f"{size} bytes, more than codec_max_frame_length={limit}: it "
                               "was not sent", endpoint=f"{mesh_name}.{method}()")
    return [data, *buffers]


