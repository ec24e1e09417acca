"""ProcMesh: processes arranged as a named mesh; spawns actor meshes on them."""

from __future__ import annotations

import logging
import secrets
import warnings
from typing import Any, TypeVar

import msgpack

from .._runtime import _context, _process_runtime as _process, _controller_calls as _services
from .._runtime._context import actor_label
from .._actors._actor import Actor
from ._actor_mesh import ActorMesh
from .._runtime._agent_calls import current_runtime, system_call
from .._actors._endpoint import check_sync_async, endpoint_table
from .._runtime._errors import UnpicklableError
from .._runtime._future import Future, chained
from .._geometry._onview import OnView
from .._runtime._recipients import procs_of
from .._geometry._view import View
from .._geometry._value_mesh import ValueMesh
from .._wire import _serial

T = TypeVar("T", bound=Actor)


class ProcMesh(OnView):
    """Processes (one per point of its extent) that host actors.

    `spawn_procs` returns at once; the processes start in the background and the first message
    to them waits for them. Slicing works as for actor meshes.
    """

    _STOP_ORDER = 1
    """An owner stops its proc meshes after its actor meshes (`ActorSlot.stop_descendants`)."""

    def __init__(self, *, procs: str, table: tuple[str, ...], full: View, view: View,
                 host_mesh: Any = None) -> None:
        self._procs = procs
        self._table = table
        self._full = full
        self._view = view
        self._host_mesh = host_mesh
        self._ranks = view.ranks()
        self._agents = procs_of(procs, table, view, self._ranks)
        """Where calls to its procs' system agents go."""
        self._stopping = False

    def spawn(self, name: str, Class: type[T], *args: Any, **kwargs: Any) -> ActorMesh[T]:
        """Spawns one `Class(*args, **kwargs)` actor on every proc of this mesh.

        Returns at once. `__init__` runs in each proc before its first message; if it raises,
        that is a supervision event of the new mesh (not an exception here). A class mixing
        sync and async endpoints is a ValueError here.
        """
        if not (isinstance(Class, type) and issubclass(Class, Actor)):
            raise TypeError(f"spawn expects an Actor subclass, got {Class!r}")
        if self._stopped:
            raise RuntimeError("`ProcMesh` has already been stopped")
        is_async = check_sync_async(Class)
        _check_names(Class)
        runtime = current_runtime()
        owner = _context.context().actor_instance
        mesh_id = f"{name}-{secrets.token_hex(4)}"
        class_name = f"{Class.__module__}.{Class.__qualname__}"
        header = msgpack.packb({
            "mesh": mesh_id, "name": name, "is_async": is_async, "class_name": class_name,
            "owner": runtime.address, "owner_id": owner.actor_id, "owner_label": owner.label,
            "owner_name": owner.name,
            "owner_class": None if owner.class_name in ("root", "client") else owner.class_name,
            "controller": _services.controller_address()})
        try:
            data, buffers = _serial.dumps((Class, args, kwargs))
        except Exception as exc:
            raise UnpicklableError(f"could not pickle {Class.__qualname__} or its arguments for "
                                   f"spawn({name!r}): {type(exc).__name__}: {exc}") from exc
        runtime.cast(owner._sender, self._agents, "spawn", [header, data, *buffers], None)
        # The controller hears what was spawned where from the spawner too, not only from each
        # proc: a proc killed before its own `actor_started` left would leave its actor unknown
        # (its death blamed on the proc mesh, not on the actor's owner).
        view = self._view
        runtime.notify_first(_services.controller_address(), "actors_spawned", {
            "mesh": mesh_id, "name": name, "class_name": class_name, "owner": runtime.address,
            "owner_id": owner.actor_id, "procs": self._procs,
            "labels": list(view.labels), "sizes": list(view.sizes),
            "view": [list(view.labels), view.offset, list(view.sizes), list(view.strides)],
            "actors": [[i, f"{self._procs}-{rank}",
                        actor_label(owner.label, class_name, name, view.point(i))]
                       for i, rank in enumerate(self._ranks)]})
        endpoints, methods = endpoint_table(Class)
        mesh: ActorMesh[T] = ActorMesh(
            mesh_id=mesh_id, name=name, class_name=class_name,
            endpoints=frozenset(endpoints), methods=frozenset(methods), procs=self._procs,
            table=self._table, full=self._view, view=self._view, owner_id=owner.actor_id,
            owner_label=owner.label)
        if owner._slot is not None:
            owner._slot.own(mesh)  # its descendants: stopped with it
        return mesh

    # -- geometry --------------------------------------------------------------------------
    def _with(self, view: View) -> "ProcMesh":
        return ProcMesh(procs=self._procs, table=self._table, full=self._full, view=view,
                        host_mesh=self._host_mesh)

    @property
    def host_mesh(self) -> Any:
        """The HostMesh these procs run on."""
        return self._host_mesh

    # -- tensor engine (monarch.tensor_engine) ----------------------------------------------
    @property
    def _device_mesh(self) -> Any:
        from .._tensor._load import device_mesh_of

        return device_mesh_of(self)

    def activate(self) -> Any:
        """Makes torch ops in the block run on every proc of this mesh (Monarch's tensor
        engine; see `monarch.tensor_engine`). Active from the call until the context exits."""
        return self._device_mesh.activate()

    def rank_tensor(self, dim: Any) -> Any:
        """Each proc's coordinate along `dim` (or several, row-major) as a remote tensor."""
        return self._device_mesh.rank(dim)

    def rank_tensors(self) -> dict[str, Any]:
        """`rank_tensor(dim)` for every dimension."""
        return self._device_mesh.ranks

    def to_table(self) -> str:
        """A plain-text grid of the procs of this mesh."""
        return self._device_mesh.to_table()

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def initialized(self) -> Future[bool]:
        """A future of True, settled once every proc of this mesh started and ran the mesh's
        `bootstrap` (`await procs.initialized`); it fails with an ActorError carrying the
        bootstrap's exception if that raised. It says the procs were usable then, not that
        they still are."""
        return _services.call("proc_mesh_ready", self._procs, list(self._ranks))

    def stats(self) -> Future[Any]:
        """A future of a ValueMesh of each proc's counters (messages received, frames and peers
        refused, internal errors, its actors, whether its I/O thread sleeps)."""
        extent = self._view.extent
        return system_call(self._agents, "stats",
                           combine=lambda values: ValueMesh(extent, values))

    def stop(self) -> Future[None]:
        """Stops every proc of this mesh (actors' `__cleanup__` run first); waits for exits."""
        self._stopping = True
        return _services.call("stop_procs", self._procs, list(self._ranks))

    @property
    def _stopped(self) -> bool:
        """(Monarch's property) True once `stop()` was called on this mesh (or a slice it was made from), or every
        one of its procs is known to have been stopped."""
        if self._stopping:
            return True
        runtime = _process.current()
        if runtime is None or not runtime.dead:
            return False
        reasons = [runtime.dead.get(self._table[r]) for r in self._ranks]
        return all(reason == STOPPED_REASON for reason in reasons)

    def logging_option(self, stream_to_client: bool = True,
                       aggregate_window_sec: int | float | None = 3,
                       level: int = logging.INFO) -> Future[None]:
        """Streams this mesh's procs' output to the client's terminal (Monarch's log
        forwarding; needs `configure(enable_log_forwarding=True)` before the mesh is spawned):
        each line as `[host proc] [rank] text` (`aggregate_window_sec=None`), or every window
        the window's identical lines folded into `[N similar log lines] ...`;
        `stream_to_client=False` stops it. `level` sets the procs' root Python logger (as in
        Monarch; INFO until changed), whether or not lines are streamed.
        Whatever the old mode held is printed first. Returns a future (await it or `.get()`).
        """
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 255:
            raise ValueError(f"Invalid logging level: {level}")
        if aggregate_window_sec is not None and (
                isinstance(aggregate_window_sec, bool) or aggregate_window_sec <= 0):
            raise ValueError(f"aggregate_window_sec must be a positive number of seconds or "
                             f"None, got {aggregate_window_sec!r}")
        applied = _services.call("logging_option", self._procs, bool(stream_to_client),
                                 aggregate_window_sec, level)

        def settle(had_effect: bool) -> None:
            if stream_to_client and not had_effect:
                warnings.warn(
                    "logging_option(stream_to_client=True) has no effect: log forwarding was "
                    "disabled when this ProcMesh was spawned. Call "
                    "configure(enable_log_forwarding=True) before spawning it.", stacklevel=3)

        return chained(applied, settle)

    def __enter__(self) -> "ProcMesh":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop().get()

    def __reduce__(self) -> Any:
        return _rebuild, (self._procs, self._table, self._full.to_wire(), self._view.to_wire(),
                          self._host_mesh)

    def __repr__(self) -> str:
        return f"ProcMesh({self._procs}, {self.extent})"


def _rebuild(procs: str, table: tuple, full: tuple, view: tuple, host_mesh: Any) -> ProcMesh:
    return ProcMesh(procs=procs, table=tuple(table), full=View.from_wire(full),
                    view=View.from_wire(view), host_mesh=host_mesh)




STOPPED_REASON = "the proc was stopped"
"""What a process learns of a proc that ended because its mesh was stopped."""


def _check_names(Class: type) -> None:
    """An endpoint named like an attribute of ActorMesh (`stop`, `slice`, `size`...) could never
    be called through the mesh: refused at spawn, with Monarch's words."""
    endpoints, _ = endpoint_table(Class)
    for name, prop in endpoints.items():
        existing = getattr(ActorMesh, name, None)
        if existing is not None:
            raise ValueError("ActorMesh has an attribute that collides with an endpoint name: "
                             f"attribute={name}, ActorMesh.{name}={existing}, endpoint={prop}")

