"""The current context: which actor is running, and which message it handles.

This is the one global the runtime keeps (a ContextVar, so each actor thread and task sees its
own). Outside any actor, `context()` is the process's root instance; in a process that is not a
proc, asking for it starts the job (the process becomes the controller) through the starter the
public surface registered (`set_job_starter`): the runtime never imports the controller.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from typing import Any, Callable

from .._geometry._view import Extent, Point

_current: contextvars.ContextVar["Context | None"] = contextvars.ContextVar(
    "monarch_context", default=None)
_root: "Context | None" = None
_root_lock = threading.Lock()
# Starts the job in a process that is not a proc; registered by `monarch._controller._start`.
_job_starter: Callable[[], None] | None = None


class Creator:
    """Who spawned an actor's mesh (`context().actor_instance.creator`): the root client or
    another actor. Picklable; `repr()` is Monarch's qualified name, e.g. `<root>`."""

    __slots__ = ("name", "class_name", "label")

    def __init__(self, name: str, class_name: str | None, label: str) -> None:
        self.name = name
        self.class_name = class_name
        self.label = label

    def __repr__(self) -> str:
        return self.label

    def __reduce__(self) -> Any:
        return Creator, (self.name, self.class_name, self.label)


class Instance:
    """The running actor (or the root client outside actors): `context().actor_instance`.

    Attributes:
        actor_id: unique id of this actor in the job.
        name: display name, `<mesh name>[<rank>]` for actors, `root` for the controller.
        class_name: qualified name of the actor's class.
        rank: this actor's point in its whole actor mesh.
        proc_id: id of the process hosting it.
        creator: who spawned its mesh, a `Creator` (None for the root itself).
    """

    def __init__(self, *, actor_id: str, name: str, class_name: str, rank: Point,
                 proc_id: str, creator: Creator | None, sender: str,
                 proc_mesh: Callable[[], Any], slot: Any = None, label: str = "<root>") -> None:
        self.actor_id = actor_id
        self.label = label
        """Monarch's name of the actor in failure reports: its owners' chain, e.g.
        `<root>.<__main__.Trainer trainers{'gpus': 0/8}>`."""
        self.name = name
        self.class_name = class_name
        self.rank = rank
        self.proc_id = proc_id
        self.creator = creator
        self._sender = sender
        self._proc_mesh = proc_mesh
        self._slot = slot
        self._children: list[Any] | None = None
        """(Monarch's name) the proc meshes this instance spawned that are not stopped; a
        test harness (Monarch's `stop_all_proc_meshes`) stops what a test left running."""

    def _adopt(self, mesh: Any) -> None:
        """Lists a proc mesh it spawned among its children, dropping the stopped ones (a job
        may spawn meshes for days)."""
        self._children = [m for m in self._children or [] if not m._stopped] + [mesh]

    @property
    def proc(self) -> Any:
        """The ProcMesh of the single process hosting this actor."""
        return self._proc_mesh()

    @property
    def proc_mesh(self) -> Any:
        """Same as `proc`."""
        return self._proc_mesh()

    def stop(self, reason: str = "stopped by the actor itself") -> None:
        """Stops this actor after the current message; later calls fail with SupervisionError."""
        if self._slot is None:
            raise RuntimeError("the root client cannot be stopped; end the script instead")
        self._slot.request_stop(reason)

    def abort(self, reason: str | None = None) -> None:
        """Fails this actor now: a supervision event for its owner, with `reason` (`no reason
        provided` when None)."""
        if self._slot is None:
            raise RuntimeError("the root client cannot abort; raise an exception instead")
        self._slot.request_abort(reason)

    def __str__(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"<Instance {self.name}>"


class Context:
    """What `context()` returns: the running actor and the point of the message it handles."""

    __slots__ = ("actor_instance", "_view", "_index", "_point", "_resolve")

    def __init__(self, instance: Instance, view: Any = None, index: int = 0,
                 resolve: Callable[[Any], Any] | None = None) -> None:
        self.actor_instance = instance
        self._view = view
        self._index = index
        self._point: Point | None = None
        self._resolve = resolve

    @property
    def message_rank(self) -> Point:
        """The point of the current message within the mesh slice that was called."""
        if self._point is None:
            if self._view is None:
                self._point = Point(0, Extent([], []))
            else:
                view = self._resolve(self._view) if self._resolve else self._view
                self._point = view.point(self._index)
        return self._point


def context() -> Context:
    """Returns the current context (the running actor, or this process's root client)."""
    ctx = _current.get()
    if ctx is not None:
        return ctx
    loop = asyncio._get_running_loop()
    if loop is not None and loop not in _client_loops:
        _client_loops.add(loop)
    return root()


def holds_calls() -> bool:
    """True on a thread outside any actor and asyncio loop: the calls it sends may wait for
    its next ones and leave together (`monarch._wire._held`); it releases them when it waits
    on a future (an asyncio loop awaits without that, so its calls leave at once)."""
    return _current.get() is None and asyncio._get_running_loop() is None


_client_loops: "weakref.WeakSet[asyncio.AbstractEventLoop]" = weakref.WeakSet()
"""asyncio loops the client used monarch from (see `wake_client_loops`)."""


def wake_client_loops() -> None:
    """Wakes the client's asyncio loops once: a fault hook (run on a thread of its own) that
    sets an `asyncio.Event` of the client's loop without `call_soon_threadsafe` is then seen
    at once, not at the loop's next timeout."""
    for loop in list(_client_loops):
        try:
            if loop.is_running():
                loop.call_soon_threadsafe(_nothing)
        except RuntimeError:  # closed meanwhile
            pass


def _nothing() -> None:
    pass


def root() -> Context:
    """This process's root context; in a process that is not a proc, starts the job."""
    if _root is None:
        if _job_starter is None:
            raise RuntimeError("no monarch job in this process: import monarch.actor to start one")
        _job_starter()
    assert _root is not None
    return _root


def set_job_starter(start: Callable[[], None]) -> None:
    """Registers how `root()` starts the job (the controller's seam; see `monarch._controller._start`)."""
    global _job_starter
    _job_starter = start


def set_root(ctx: Context | None) -> None:
    """Sets this process's root context (bootstrap only)."""
    global _root
    with _root_lock:
        _root = ctx


enter: Callable[[Context], contextvars.Token] = _current.set
"""Makes a context current in this thread/task; returns the token for `leave` (the context
variable's own method: twice a message on an actor's thread, no Python frame of ours)."""

leave: Callable[[contextvars.Token], None] = _current.reset
"""Restores the context that `enter` replaced."""


def current_rank() -> Point:
    """The point of the current message within the called mesh slice."""
    return context().message_rank


def current_size() -> dict[str, int]:
    """The sizes of the called mesh slice, by dimension."""
    extent = context().message_rank.extent
    return dict(zip(extent.labels, extent.sizes))


def current_actor_name() -> str:
    """The display name of the running actor."""
    return context().actor_instance.name


_log_factory_installed = False


def install_log_prefix() -> None:
    """Makes Python log messages name the actor (or root) that logged them, as Monarch's do:
    `[actor=<root>.<__main__.Trainer trainers{'gpus': 0/8}>] loss 0.25`.

    Wraps the log record factory (once per process, when its runtime starts), so every handler
    sees the prefix; `monarch.config.prefix_python_logs_with_actor = False` turns it off. The
    record keeps the prefix in `actor_prefix` (telemetry strips it: it tags records anyway).
    """
    global _log_factory_installed
    import logging

    with _root_lock:
        if _log_factory_installed:
            return
        _log_factory_installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        ctx = _current.get() or _root
        if ctx is not None and record.msg and _prefixing():
            prefix = f"[actor={ctx.actor_instance}] "
            record.actor_prefix = prefix
            record.msg = f"{prefix}{record.msg}"
        return record

    logging.setLogRecordFactory(factory)


def _prefixing() -> bool:
    from .. import config

    return bool(getattr(config, "prefix_python_logs_with_actor", True))


def actor_label(owner_label: str, class_name: str, name: str, point: Any) -> str:
    """How an actor is named in reports: `<root>.<__main__.A a{'gpus': 0/2}>`."""
    return f"{owner_label}.<{class_name} {name}{point!r}>"
