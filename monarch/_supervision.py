"""Failures of meshes, as owners see them: MeshFailure and the root's fault hook."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import sys
import threading
from typing import Any, Callable


class MeshFailure:
    """A failure of (part of) a mesh, given to `__supervise__` and `unhandled_fault_hook`.

    Attributes:
        mesh_name: the mesh's name as given to spawn (or the proc mesh's id).
        mesh: the mesh id.
        rank: the failed actor's rank in its mesh (None for a whole proc mesh).
        class_name, host, pid, proc: where it ran.
        exit_code / signal: how its process ended, when it did.
        reason: the cause in one paragraph (with the remote traceback when there is one).
    """

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = dict(fields)
        self.mesh_name: str = fields.get("mesh_name", "")
        self.mesh: str = fields.get("mesh", "")
        self.rank: int | None = fields.get("rank")
        self.class_name: str | None = fields.get("class_name")
        self.host: str | None = fields.get("host")
        self.pid: int | None = fields.get("pid")
        self.proc: str | None = fields.get("proc")
        self.exit_code: int | None = fields.get("exit_code")
        self.signal: int | None = fields.get("signal")
        self.reason: str = fields.get("reason", "")
        self._report: str = fields.get("report", self.reason)

    @classmethod
    def from_report(cls, fields: dict[str, Any]) -> "MeshFailure":
        """Builds a failure from the dict the supervisor sends."""
        return cls(fields)

    def report(self) -> str:
        """The failure report: which actor failed, and why."""
        return self._report

    def __repr__(self) -> str:
        return f"MeshFailure(mesh_name={self.mesh_name!r}, report={self._report!r})"

    def __reduce__(self) -> Any:
        return MeshFailure, (self.fields,)


def default_unhandled_fault_hook(failure: MeshFailure) -> None:
    """Prints the failure and ends the controller, like an uncaught exception.

    The main thread receives KeyboardInterrupt (a real SIGINT sent to it, so a blocked `.get()`
    is interrupted too); uncaught, it ends the script with status 130, as in Monarch.
    """
    now = datetime.datetime.now()
    print(f"Unhandled monarch error on the root actor, hostname={socket.gethostname()}, "
          f"PID={os.getpid()} at time {now}:\n{failure.report()}", file=sys.stderr, flush=True)
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]


# Returns the hook in force now: `monarch.actor` registers a lookup of its module attribute,
# which users replace by assignment (the runtime never imports the public surface).
_fault_hook_lookup: Callable[[], Callable[[MeshFailure], None]] = \
    lambda: default_unhandled_fault_hook


def set_fault_hook_lookup(lookup: Callable[[], Callable[[MeshFailure], None]]) -> None:
    """Registers where `dispatch_root` finds the root's unhandled fault hook."""
    global _fault_hook_lookup
    _fault_hook_lookup = lookup


def dispatch_root(failure: MeshFailure) -> None:
    """Runs `monarch.actor.unhandled_fault_hook` for a failure nobody owns but the root.

    Runs on its own thread: a hook may block or call into monarch.
    """
    def run() -> None:
        hook = _fault_hook_lookup()
        try:
            hook(failure)
        except BaseException:  # noqa: BLE001 - a broken hook must not end supervision
            import traceback

            traceback.print_exc()

    threading.Thread(target=run, name="monarch-fault-hook", daemon=True).start()
