"""Service calls: how any process asks the controller for job-level work.

Spawning and stopping procs, named singletons and the like are done by the controller. In the
controller a service runs directly; elsewhere the request travels as a system call to the
controller's agent (`@ctl`) and the answer comes back on a port. The proc side only knows the
names of services, never their implementation.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _process_runtime as _process
from ._future import Future
from ._ports import CallInfo, OneSink
from ._recipients import Recipients
from .._geometry._view import View
from .._wire import _serial

CONTROLLER_MESH = "@ctl"
"""The system mesh id of the controller's agent."""

_NO_DIMS = View.dense([], [])
"""The controller's agent, as a mesh: one point, no dimension."""

_local: dict[str, Callable[..., Any]] = {}
"""Services implemented in this process (filled by the controller's bootstrap)."""

_controller_address: str | None = None


def register(name: str, fn: Callable[..., Any]) -> None:
    """Implements service `name` in this process (controller bootstrap only)."""
    _local[name] = fn


def set_controller(address: str) -> None:
    """Tells a proc where its controller listens (proc bootstrap only)."""
    global _controller_address
    _controller_address = address


def controller_address() -> str:
    """The controller's address as this process knows it."""
    runtime = _process.current()
    if _local and runtime is not None:
        return runtime.address
    if _controller_address is None:
        raise RuntimeError("this process does not know its controller")
    return _controller_address


def call(name: str, *args: Any) -> Future[Any]:
    """Runs service `name` with `args` in the controller; a future of its answer."""
    fn = _local.get(name)
    if fn is None and _process.current() is None:
        from ._context import root

        root()  # the first use of monarch in a script: the job starts here
        fn = _local.get(name)
    if fn is not None:
        return _as_future(fn, args)
    runtime = _process.current()
    if runtime is None or _controller_address is None:
        raise RuntimeError(f"service {name!r} needs a running monarch job")
    future: Future[Any] = Future._pending()
    info = CallInfo("controller", name, lambda i: "<controller>")
    port = runtime.new_port(OneSink(future, _controller_address, info))
    data, buffers = _serial.dumps(args)
    runtime.cast("svc:" + runtime.identity.name, Recipients(
        CONTROLLER_MESH, "ctl", (_controller_address,), _NO_DIMS, [0]), name, [data, *buffers],
        (runtime.address, port))
    return future


def _as_future(fn: Callable[..., Any], args: tuple) -> Future[Any]:
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - delivered through the future
        future: Future[Any] = Future._pending()
        future.set_exception(exc)
        return future
    if isinstance(result, Future):
        return result
    future = Future._pending()
    future.set_result(result)
    return future


def local_service(name: str) -> Callable[..., Any] | None:
    """The implementation of `name` in this process, if it has one (controller only)."""
    return _local.get(name)
