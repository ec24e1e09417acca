"""Failures of meshes, as owners see them: MeshFailure and the root's fault hook."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import sys
import threading
from typing import Any, Callable

from .._wire import _signals
from .._runtime._errors import indent


class MeshFailure:
    """A failure of (part of) a mesh, given to `__supervise__` and `unhandled_fault_hook`.

    `str()` and `repr()` read as Monarch's: `MeshFailure(mesh_name=..., crashed_ranks=[r],
    event=Supervision event: actor ... failed: ...)`.

    Attributes:
        mesh_name: the mesh's id, `<name>-<suffix>` (as Monarch names meshes).
        name: the name the mesh was spawned with.
        mesh: the mesh id (same as `mesh_name`).
        rank: the failed actor's rank in its mesh (for a proc with no actor, its rank in its
            proc mesh).
        crashed_ranks: the ranks of the mesh this failure is about.
        class_name, host, pid, proc: where it ran.
        exit_code / signal: how its process ended, when it did.
        reason: the cause in one paragraph (with the remote traceback when there is one).
    """

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = dict(fields)
        self.mesh: str = fields.get("mesh") or fields.get("mesh_name", "")
        self.mesh_name: str = self.mesh
        self.name: str = fields.get("mesh_name") or self.mesh
        self.rank: int | None = fields.get("rank")
        self.crashed_ranks: list[int] = [self.rank] if self.rank is not None else []
        self.class_name: str | None = fields.get("class_name")
        self.host: str | None = fields.get("host")
        self.pid: int | None = fields.get("pid")
        self.proc: str | None = fields.get("proc")
        self.exit_code: int | None = fields.get("exit_code")
        self.signal: int | None = fields.get("signal")
        self.reason: str = fields.get("reason", "")
        self._report: str = fields.get("report", self.reason)
        self._label: str | None = fields.get("label")
        self.log_tail: list[str] = list(fields.get("log_tail") or [])
        """The last lines its proc wrote, when `tail_log_lines` asks for them."""

    @classmethod
    def from_report(cls, fields: dict[str, Any]) -> "MeshFailure":
        """Builds a failure from the dict the supervisor sends."""
        return cls(fields)

    def report(self) -> str:
        """The failure report: which actor failed, and why."""
        return self._report

    def _event(self) -> str:
        if self._label:
            return f"Supervision event: actor {self._label} failed:\n  {indent(self.reason)}\n"
        return f"Supervision event: {self._report}\n"

    def __repr__(self) -> str:
        ranks = ", ".join(str(r) for r in self.crashed_ranks)
        return (f"MeshFailure(mesh_name={self.mesh_name}, crashed_ranks=[{ranks}], "
                f"event={self._event()})")

    __str__ = __repr__

    def __reduce__(self) -> Any:
        return MeshFailure, (self.fields,)


last_unhandled: str | None = None
"""The report of the failure that ended the script through the default hook, if one did."""


def default_unhandled_fault_hook(failure: MeshFailure) -> None:
    """Prints the failure and ends the controller, like an uncaught exception.

    The main thread receives KeyboardInterrupt (a real SIGINT sent to it, so a blocked `.get()`
    is interrupted too); uncaught, it ends the script with status 130, as in Monarch.
    """
    now = datetime.datetime.now()
    tail = ""
    if failure.log_tail:
        tail = (f"\nThe last {len(failure.log_tail)} lines its process wrote:\n  "
                + "\n  ".join(failure.log_tail))
    global last_unhandled
    last_unhandled = failure.report().strip()
    print(f"Unhandled monarch error on the root actor, hostname={socket.gethostname()}, "
          f"PID={os.getpid()} at time {now}:\n{failure.report()}{tail}", file=sys.stderr,
          flush=True)
    _MAIN_INTERRUPT.deliver()


class _MainInterrupt:
    """Ends the main thread with KeyboardInterrupt, and does it again if the interpreter
    swallowed it.

    A signal's handler runs on the main thread at its next bytecode; when that bytecode belongs
    to a finalizer (a `__del__`, a weakref callback, whatever the garbage collector finalizes on
    the main thread) the KeyboardInterrupt it raises is printed as "Exception ignored" and
    dropped, and the script would go on as if no fault had happened. Once a fault asked for
    the interrupt, such a swallowed KeyboardInterrupt goes to `sys.unraisablehook`, which wakes
    this object's thread to send SIGINT again (not from the hook itself: it runs inside the
    finalizer too).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._again = threading.Event()
        self._armed = False

    def prepare(self) -> None:
        """Makes sure a fault's SIGINT reaches the main thread (call at the job's start).

        A script started in the background by a shell (`python train.py &` in a batch
        script, a CI runner) inherits SIGINT ignored, and Python then installs no handler: a
        fault's interrupt was dropped and the script went on as if nothing had failed. On the
        main thread, an ignored SIGINT gets a handler that raises KeyboardInterrupt once a
        fault asked for it and ignores every other SIGINT, as before."""
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set a handler; a job rarely starts elsewhere
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._armed:
            raise KeyboardInterrupt

    def deliver(self) -> None:
        with self._lock:
            if not self._armed:
                self._armed = True
                previous = sys.unraisablehook

                def swallowed(unraisable: Any) -> None:
                    if unraisable.exc_type is KeyboardInterrupt:
                        self._again.set()  # sent again at once: nothing to print
                        return
                    previous(unraisable)

                sys.unraisablehook = swallowed
                threading.Thread(target=self._resend, name="monarch-fault-interrupt",
                                 daemon=True).start()
        self._send()

    def _resend(self) -> None:
        while True:
            self._again.wait()
            self._again.clear()
            self._send()

    @staticmethod
    def _send() -> None:
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]


_MAIN_INTERRUPT = _MainInterrupt()
_signals.wrappable.append(_MAIN_INTERRUPT._on_sigint)  # its interrupt waits for a step's end too
prepare_main_interrupt = _MAIN_INTERRUPT.prepare


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
        from .._runtime._context import wake_client_loops

        hook = _fault_hook_lookup()
        try:
            hook(failure)
        except BaseException:  # noqa: BLE001 - a broken hook must not end supervision
            import traceback

            traceback.print_exc()
        wake_client_loops()  # what the hook set on the client's loop is seen now

    threading.Thread(target=run, name="monarch-fault-hook", daemon=True).start()
