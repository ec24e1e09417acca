"""KeyboardInterrupt on the main thread, held back while the message plane changes state.

A signal's Python handler runs on the main thread between two bytecodes, so the
KeyboardInterrupt of Python's default SIGINT handler can land between a `sendmsg` that wrote a
message's bytes and the bookkeeping that records them, or between reading a message and
delivering it: the stream to that peer is then corrupt, and every later call to its actors
waits forever (a script that caught ~300 interrupts in a loop of calls hung this way within
seconds). Monarch's Rust runtime has no such windows. Here the main thread marks those steps
(`with DEFERRED:`); while one runs, the SIGINT handler records the interrupt, and the step's end
raises it.

A KeyboardInterrupt raised inside a finalizer (a zmq frame freed on the main thread checks for
signals) is printed as "Exception ignored" and dropped: the interrupt would be lost, and the
user presses Ctrl-C again. While the deferring handler is installed, such a swallowed
KeyboardInterrupt sends SIGINT to the main thread again (from a helper thread: the hook runs
inside the finalizer), so it lands at the next bytecode outside it.

The deferring handler takes the place of Python's default one (or of the fault interrupt's, see
`_actors._supervision`) when the main thread enters the runtime (`guard`, at each call and
wait): a handler that a script or its host sets later replaces it (ipykernel sets the default
one anew for each cell, and the next entry wraps that again). Any other handler is left alone:
a script's own SIGINT handler runs when it always did.
"""

from __future__ import annotations

import _signal
import signal
import sys
import threading
from typing import Any, Callable

MAIN = threading.main_thread().ident
"""The thread that runs signal handlers."""

depth = 0
"""Deferring steps the main thread is inside now (main thread only). Hot paths mark a step
inline: ``_signals.depth += 1``, ``try:`` the step ``finally: _signals.depth -= 1``, then
``if _signals.pending: _signals.fire()`` (no call between the increment and the `try`)."""

pending: list[Callable[[int, Any], Any]] = []
"""Handlers of interrupts that came during a step, to run at its end (main thread only)."""

wrappable: list[Any] = []
"""Handlers of the runtime's own that `guard` may wrap (the fault interrupt's)."""


class _Deferring:
    """The SIGINT handler in force while `guard` installed it: `inner` (the handler it took
    the place of) runs at once, or at the end of the step under way."""

    __slots__ = ("inner",)

    def __init__(self, inner: Callable[[int, Any], Any]) -> None:
        self.inner = inner

    def __call__(self, signum: int, frame: Any) -> None:
        if depth:
            pending.append(self.inner)
            return
        self.inner(signum, frame)


def guard() -> None:
    """Puts the deferring handler in place of Python's default SIGINT handler, or of the
    fault interrupt's (`wrappable`). Main thread only; cheap when nothing changes."""
    current = _signal.getsignal(signal.SIGINT)  # not `signal.getsignal`: its enum lookup
    if type(current) is _Deferring:  # raises and catches a ValueError for a callable, ~2 us
        return
    if current is signal.default_int_handler or current in wrappable:
        signal.signal(signal.SIGINT, _Deferring(current))  # type: ignore[arg-type]
        _resend.start()


def fire() -> None:
    """Raises the interrupt that came during the steps just ended, unless one is under way
    (main thread only)."""
    if depth or not pending:
        return
    handlers = pending[:]
    pending.clear()
    for handler in handlers:
        handler(signal.SIGINT, None)  # Python's default one raises here


class _Resend:
    """Sends SIGINT to the main thread again when a finalizer swallowed its KeyboardInterrupt
    (see the module's doc); installed with the deferring handler, once."""

    def __init__(self) -> None:
        self._again = threading.Event()
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        previous = sys.unraisablehook

        def swallowed(unraisable: Any) -> None:
            if unraisable.exc_type is KeyboardInterrupt and \
                    isinstance(_signal.getsignal(signal.SIGINT), _Deferring):
                self._again.set()  # sent again at once: nothing to print
                return
            previous(unraisable)

        sys.unraisablehook = swallowed
        threading.Thread(target=self._run, name="monarch-sigint-again", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._again.wait()
            self._again.clear()
            signal.pthread_kill(MAIN, signal.SIGINT)  # type: ignore[arg-type]


_resend = _Resend()


class _Deferred:
    """`with DEFERRED:` — a step during which the main thread's KeyboardInterrupt waits (on
    other threads it does nothing: they never run signal handlers)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global depth
        if threading.get_ident() == MAIN:
            depth += 1

    def __exit__(self, *exc: Any) -> None:
        global depth
        if threading.get_ident() == MAIN:
            depth -= 1
            fire()


DEFERRED = _Deferred()


def holding(lock: threading.Lock, block: bool, fn: Callable[[], None]) -> bool:
    """Runs `fn()` holding `lock`: waiting for it (`block`), or only if it is free (the loop's
    way: it never waits; the thread holding it does the work). False when `fn` did not run.
    No KeyboardInterrupt of the main thread lands between taking the lock and trying: `with`
    when waiting, `DEFERRED` around the acquire when not."""
    if block:
        with lock:
            fn()
        return True
    with DEFERRED:
        if not lock.acquire(blocking=False):
            return False
        try:
            fn()
        finally:
            lock.release()
    return True
