"""Client lifetime and multi-host workers: shutdown_context, worker loops, attach."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from ._future import Future


def shutdown_context(host_timeout: float | None = None) -> Future[None]:
    """Shuts this controller's job down: stops its procs, its zygote and its sockets.

    Also runs at interpreter exit. The script itself keeps running; a later use of monarch
    starts a new job.
    """
    from ._controller._job import current_job

    job = current_job()
    done: Future[None] = Future()
    if job is not None:
        job.shutdown(timeout=host_timeout if host_timeout is not None else 5.0)
    done.set_result(None)
    return done


@dataclasses.dataclass(frozen=True)
class BootstrapCommand:
    """The command that starts a worker (host agent) process on a host."""

    program: str
    args: tuple[str, ...]
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    def argv(self) -> list[str]:
        """The full command line."""
        return [self.program, *self.args]


def default_bootstrap_cmd() -> BootstrapCommand:
    """How this runtime starts a worker on another host: this interpreter, our agent module."""
    return BootstrapCommand(sys.executable, ("-m", "monarch._host.worker"))


def run_worker_loop_forever(*, address: str, ca: Any = None, private_key: Any = None) -> None:
    """Runs a worker (host agent) at `address` until the process is killed."""
    from ._host import worker

    worker.serve(address, forever=True)


def run_worker_loop_until_shutdown(*, address: str, ca: Any = None,
                                   private_key: Any = None) -> None:
    """Runs a worker at `address` until the controller that attached to it shuts it down."""
    from ._host import worker

    worker.serve(address, forever=False)


def start_worker_loop_forever(*, address: str, ca: Any = None,
                              private_key: Any = None) -> Future[None]:
    """Starts a worker at `address` on a background thread; the future settles if it ends."""
    from ._host import worker

    return worker.serve_in_background(address)


def attach_to_workers(*, workers: Any, ca: Any = None, private_key: Any = None,
                      name: str | None = None) -> Any:
    """A HostMesh over running workers (addresses, or futures of addresses), `hosts` dim."""
    from ._controller import _remote

    return _remote.attach_to_workers(list(workers), name)


def attach(addr: str) -> None:
    """Attaches this client to a running worker at `addr` (same as a one-host attach)."""
    attach_to_workers(workers=[addr])
