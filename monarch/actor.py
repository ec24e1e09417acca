"""The actor API: a drop-in for torchmonarch's `monarch.actor`.

    from monarch.actor import Actor, endpoint, this_host

    class Trainer(Actor):
        @endpoint
        def step(self, n: int) -> float: ...

    procs = this_host().spawn_procs(per_host={"gpus": 8})
    trainers = procs.spawn("trainers", Trainer)
    losses = trainers.step.call(0).get()

Importing this module starts nothing; the job starts on first use.
"""

from __future__ import annotations

from typing import Any

from ._controller import _start as _jobstart
from ._actors import _supervision
from . import config  # noqa: F401 - _jobstart: the job starts on use
from . import service  # noqa: F401 - registers what Actor.options returns
from ._actors._actor import Actor
from ._mesh._actor_mesh import ActorMesh  # noqa: F401 - importable, as in Monarch
from ._actors._channel import Channel, Port, PortReceiver
from ._host._bootstrap_command import BootstrapCommand, default_bootstrap_cmd
from ._runtime._context import Context, context, current_actor_name, current_rank, current_size
from ._actors._endpoint import (
    Accumulator, Endpoint, as_endpoint, concurrent_endpoint, endpoint, returns_future, send,
)
from ._runtime._errors import ActorError, SupervisionError
from ._runtime._future import Future
from ._mesh._host_mesh import HostMesh
from ._runtime._ids import ProcId, Uid
from .config import ChannelTransport, enable_transport
from ._mesh._proc_mesh import ProcMesh
from ._geometry._view import Extent, Point
from ._runtime._singletons import get_or_spawn_controller
from ._actors._supervision import MeshFailure
from ._actors._supervision import default_unhandled_fault_hook as unhandled_fault_hook
from ._geometry._value_mesh import ValueMesh
from ._controller._workers import (
    attach, attach_to_workers, run_worker_loop_forever, run_worker_loop_until_shutdown,
    shutdown_context, start_worker_loop_forever,
)


def this_host() -> HostMesh:
    """The host this code runs on, as a HostMesh with no dimensions."""
    return context().actor_instance.proc.host_mesh


def this_proc() -> ProcMesh:
    """The process this code runs in, as a ProcMesh of one; `spawn` on it spawns actors here."""
    return context().actor_instance.proc


# The root's failures run whatever `monarch.actor.unhandled_fault_hook` is when they arrive
# (users replace it by assignment); the runtime reads it through this seam.
_supervision.set_fault_hook_lookup(lambda: unhandled_fault_hook)


def __getattr__(name: str) -> Any:
    # The telemetry names import the OpenTelemetry SDK (~100 ms): only code that uses them pays.
    if name in ("span", "traced", "get_meter"):
        from . import telemetry

        return getattr(telemetry, name)
    raise AttributeError(f"module 'monarch.actor' has no attribute {name!r}")


def debug_controller() -> Any:
    """The job's debug controller actor (`breakpoint()` sessions register with it)."""
    from ._actors._debug import debug_controller as _debug_controller

    return _debug_controller()


# span, traced and get_meter are served lazily by __getattr__ below.
__all__ = [  # noqa: F822
    "Accumulator", "Actor", "ActorError", "BootstrapCommand", "Channel", "ChannelTransport",
    "Context", "Endpoint", "Extent", "Future", "HostMesh", "MeshFailure", "Point", "Port", "PortReceiver", "ProcId",
    "ProcMesh", "Uid", "ValueMesh", "as_endpoint", "attach", "attach_to_workers",
    "concurrent_endpoint", "config", "context", "current_actor_name", "current_rank",
    "current_size", "debug_controller", "default_bootstrap_cmd", "enable_transport", "endpoint",
    "get_meter", "get_or_spawn_controller", "returns_future", "run_worker_loop_forever",
    "run_worker_loop_until_shutdown", "send", "shutdown_context", "span",
    "start_worker_loop_forever", "this_host", "this_proc", "traced", "unhandled_fault_hook",
    "SupervisionError",
]
