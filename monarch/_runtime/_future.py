"""Future: the handle every adverb returns; usable with `.get()` from threads and `await`.

A future is settled once, from any thread (usually the process's I/O loop). Its value may be
lazy: a function run once, in the first consumer's thread, so the I/O loop never unpickles
results. A future may also wrap a coroutine (`returns_future`), run when first consumed.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import sys
import threading
import warnings
import weakref
from typing import Any, Callable, Coroutine, Generator, Generic, Iterable, TypeVar

from ..telemetry import end_call

R = TypeVar("R")

_PENDING, _LAZY, _VALUE, _ERROR = range(4)

before_result: Callable[[], None] | None = None
"""Run before a future hands its outcome to its consumer (`get`, `await`, `as_asyncio`): in
the controller, its output relay writes what procs printed before they answered, so a line
an endpoint printed is out before the caller prints what it returned (`_host._output_relay`)."""

IN_LOOP_GET = ("Future.get() blocks the running asyncio event loop of this thread until the "
               "future settles (an active event loop cannot run meanwhile); use `await future` "
               "or `future.as_asyncio()` there instead")
"""Warned (UserWarning, as Monarch does) when a pending future's get() runs on a running loop."""


class Future(Generic[R]):
    """The eventual result of an endpoint call or other asynchronous operation.

    Use `.get(timeout=None)` from synchronous code (raises `TimeoutError` if the timeout
    passes) or `await fut` from async code. `.result()` is `.get()`; `.exception()` returns the
    exception instead of raising it (None on success).
    """

    __slots__ = ("_lock", "_state", "_value", "_callbacks", "_coro", "_guard", "_fails",
                 "_starter", "_span", "_gather", "_unobserved", "__weakref__")

    def __init__(self) -> None:
        raise TypeError("Future objects are returned by Monarch operations (an endpoint call, "
                        "a spawn, a returns_future function); they are not constructed "
                        "directly")

    @classmethod
    def _pending(cls) -> "Future[Any]":
        """A new pending future (the runtime's constructor)."""
        future = cls.__new__(cls)
        future._init()
        return future

    @classmethod
    def _from_coro(cls, coro: Coroutine[Any, Any, Any]) -> "Future[Any]":
        """A future of `coro`'s result, run when first observed (`get` runs it on a
        background loop, `await` on the awaiting one), in the context of this call: the
        context variables the caller had set (a span, a tag) are what the body sees."""
        future = cls.__new__(cls)
        future._init((coro, contextvars.copy_context()))
        # one never observed runs nothing, and says nothing ("coroutine ... was never awaited")
        weakref.finalize(future, coro.close).atexit = False
        return future

    def _init(self, coro: tuple[Coroutine[Any, Any, R], contextvars.Context] | None = None
              ) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[], None]] | None = None
        self._coro = coro
        self._starter: Callable[[], Future[Any]] | None = None
        self._fails = False
        self._span: Any = None
        """The caller's span (`telemetry.begin_call`) this future ends when it settles."""
        self._gather: Any = None
        self._unobserved = False
        """Work started in the background (`exec_command`): its first `get()` on a running
        loop warns even when the work is done, as Monarch's first observation of a task does."""
        """The sink of the replies that settle it, when there are several (`_gather`);
        dropped when it settles."""
        # Held while pending: waiters block on it; settling releases it.
        self._lock = threading.Lock()
        self._lock.acquire()
        self._guard = threading.Lock()

    @staticmethod
    def deferred(start: Callable[[], "Future[R]"]) -> "Future[R]":
        """A future whose work begins when it is first observed (`get`, `await`, a done
        callback): `start()` then returns the future it settles like. One never observed
        starts nothing (a receive that claims no message)."""
        future: Future[R] = Future._pending()
        future._starter = start
        return future

    def _start_deferred(self) -> None:
        with self._guard:
            start, self._starter = self._starter, None
        if start is not None:
            source = start()
            source.add_done_callback(lambda: self._settle_like(source))

    def _settle_like(self, source: "Future[Any]") -> None:
        if source._state == _LAZY:
            self.set_lazy(source._resolve_callable(), source._fails)
        else:
            self._settle(source._state, source._value)

    # -- consumers -------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> R:
        """Waits for and returns the value; raises the call's exception or `TimeoutError`.
        A timeout is None or a finite number of seconds >= 0 (ValueError otherwise, before
        anything starts; a settled future answers whatever the timeout)."""
        if self._state == _PENDING or self._unobserved:
            self._unobserved = False
            if timeout is not None:
                _check_timeout(timeout)
            if asyncio._get_running_loop() is not None and _from_user_code():
                warnings.warn(IN_LOOP_GET, UserWarning, stacklevel=2)
        if self._starter is not None:
            self._start_deferred()
        if self._coro is not None:
            self._start_coro()
        if self._state == _PENDING and not self._wait(timeout):
            raise TimeoutError(f"future not ready after {timeout} seconds")
        if before_result is not None:
            before_result()
        return self._resolve()

    def get_following(self, timeout: float) -> R:
        """`get` of a pending future settled by the process's loop, for a thread that must
        not lead that loop while it waits: one that serves the admin API, whose CPU time is
        what a request costs the job (leading, it ran the job's own traffic as the request's,
        and each hand-over of the loop cost both threads)."""
        if self._state == _PENDING and not self._lock_wait(timeout):
            raise TimeoutError(f"future not ready after {timeout} seconds")
        return self._resolve()

    def result(self, timeout: float | None = None) -> R:
        """Same as `get`."""
        return self.get(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Waits, then returns the exception the future failed with, or None."""
        try:
            self.get(timeout)
        except TimeoutError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the point is to return it
            return exc
        return None

    def done(self) -> bool:
        """True once settled."""
        return self._state != _PENDING

    def __await__(self) -> Generator[Any, None, R]:
        self._unobserved = False
        if self._starter is not None:
            self._start_deferred()
        if self._coro is not None and self._state == _PENDING:
            task = self._start_body(asyncio.get_running_loop())
            if task is not None:  # on the awaiting loop; cancelling the awaiter cancels it
                yield from task.__await__()
        if self._state == _PENDING:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            self.add_done_callback(lambda: _wake_soon(loop, waiter))
            yield from waiter.__await__()
        elif self.failed():
            # Settled before the await (the answer beat the awaiting coroutine): what the loop
            # was handed before the failure (an owner's `__supervise__` of the same failure)
            # runs before the await raises, as it does when the failure wakes the await.
            yield
        if before_result is not None:
            before_result()
        return self._resolve()

    def as_asyncio(self) -> asyncio.Future[R]:
        """A future of the running loop that settles with this one (RuntimeError off a loop).
        A settled future gives one already done; a coroutine not yet started runs on this
        loop. Cancelling what it returns cancels only that observer: the work goes on, and
        a later `get`, `await` or `as_asyncio` still sees its outcome."""
        self._unobserved = False
        loop = asyncio._get_running_loop()
        if loop is None:
            raise RuntimeError("as_asyncio() requires a running asyncio event loop: call it "
                               "from a coroutine, or use get() outside one")
        observer: asyncio.Future[R] = loop.create_future()
        if self._state == _PENDING and self._coro is not None:
            self._start_body(loop)  # the body itself, a task of this loop
        if self._state == _PENDING and self._starter is not None:
            _hold(loop.create_task(self._observed_here()))  # the work, on this loop
        self.add_done_callback(lambda: _copy_soon(loop, observer, self))
        return observer

    # -- producers (runtime) ---------------------------------------------------------------
    def set_result(self, value: Any) -> None:
        """Settles with a value. Later settlements are ignored."""
        self._settle(_VALUE, value)

    def set_exception(self, exc: BaseException) -> None:
        """Settles with an exception. Later settlements are ignored."""
        self._settle(_ERROR, exc)

    def set_lazy(self, compute: Callable[[], Any], fails: bool = False) -> None:
        """Settles with a function computed once by the first consumer (value or raise);
        `fails` says the computation will raise (known before it runs)."""
        self._fails = fails
        self._settle(_LAZY, compute)

    def failed(self) -> bool:
        """True once settled with an exception (or with a value that will raise)."""
        return self._state == _ERROR or (self._state == _LAZY and self._fails)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Runs `callback()` once settled (at once if already settled), in the settling thread."""
        if self._starter is not None:
            self._start_deferred()
        with self._guard:
            if self._state == _PENDING:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback()

    def _settle(self, state: int, value: Any) -> None:
        with self._guard:
            if self._state != _PENDING:
                return
            self._value = value
            self._state = state
            callbacks, self._callbacks = self._callbacks, None
            span, self._span = self._span, None
            self._gather = None
        self._lock.release()
        if span is not None:  # before the callbacks, as a done callback registered first
            end_call(span, "error" if state == _ERROR or (state == _LAZY and self._fails)
                     else "ok")
        if callbacks:
            for callback in callbacks:
                callback()

    def _wait(self, timeout: float | None) -> bool:
        if _waiter is not None:
            return _waiter(self, timeout)
        return self._lock_wait(timeout)

    def _lock_wait(self, timeout: float | None) -> bool:
        if timeout is None:
            with self._lock:  # no window for a signal's exception between taking and giving
                return True
        if not self._lock.acquire(timeout=max(timeout, 0)):
            return False
        self._lock.release()  # let other waiters through
        return True

    def _resolve_callable(self) -> Callable[[], Any]:
        """A lazy value's computation, shared: run once, by whichever future asks first."""
        return lambda: self._resolve()

    def _resolve(self) -> R:
        if self._state == _LAZY:
            with self._guard:
                if self._state == _LAZY:
                    try:
                        self._value, self._state = self._value(), _VALUE
                    except BaseException as exc:  # noqa: BLE001 - stored for every consumer
                        self._value, self._state = exc, _ERROR
        if self._state == _ERROR:
            raise self._value
        return self._value

    def _start_coro(self) -> None:
        body = self._take_body()  # taken here: the first observer owns it
        if body is not None:
            loop = background_loop()
            loop.call_soon_threadsafe(self._run_body, loop, body)

    def _start_body(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[None] | None:
        """Starts the coroutine body as a task of `loop` (called on that loop's thread),
        unless an observer took it already."""
        body = self._take_body()
        return None if body is None else self._run_body(loop, body)

    def _take_body(self) -> tuple[Coroutine[Any, Any, R], contextvars.Context] | None:
        with self._guard:
            body, self._coro = self._coro, None
        return body

    def _run_body(self, loop: asyncio.AbstractEventLoop,
                  body: tuple[Coroutine[Any, Any, R], contextvars.Context]) -> asyncio.Task[None]:
        """The body as a task of `loop`, in the context of the call; held until it ends."""
        coro, ctx = body
        task = loop.create_task(self._drive(coro), context=ctx)
        _hold(task)
        return task

    async def _drive(self, coro: Coroutine[Any, Any, R]) -> None:
        """Runs `coro` and settles with its outcome, whatever it raises: a BaseException
        (KeyboardInterrupt, SystemExit) must not end the loop that runs every future's
        coroutine, nor leave this one pending."""
        try:
            value = await coro
        except BaseException as exc:  # noqa: BLE001 - the consumers get it
            self._settle(_ERROR, exc)
        else:
            self._settle(_VALUE, value)

    async def _observed_here(self) -> None:
        """Drives a pending coroutine or deferred start on the running loop for
        `as_asyncio`; its observers get the outcome, so the task itself ends quietly."""
        try:
            await self
        except BaseException:  # noqa: BLE001 - observers have it
            pass

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _LAZY: "done", _VALUE: "done", _ERROR: "failed"}
        return f"<Future {state[self._state]}>"


def _from_user_code() -> bool:
    """Whether the get() being run was called by code outside monarch (the runtime's own
    blocking steps, a spawn_procs called from a coroutine, are not the user's to change)."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # result(), exception()
    caller = frame.f_globals.get("__name__", "") if frame is not None else ""
    return not (caller == "monarch" or caller.startswith("monarch."))


def _check_timeout(timeout: Any) -> None:
    try:
        valid = math.isfinite(timeout) and timeout >= 0
    except TypeError:
        valid = False
    if not valid:
        raise ValueError(f"invalid timeout {timeout!r}: give None or a finite number of "
                         "seconds >= 0")


_waiter: Callable[["Future[Any]", float | None], bool] | None = None


def set_waiter(waiter: Callable[["Future[Any]", float | None], bool] | None) -> None:
    """Installs how pending futures are waited for (the runtime lets waiters lead its loop)."""
    global _waiter
    _waiter = waiter


_driving: set[asyncio.Task[Any]] = set()
"""Tasks `as_asyncio` started, held until done (the loop keeps only weak references)."""


def _hold(task: asyncio.Task[Any]) -> None:
    _driving.add(task)
    task.add_done_callback(_release)


def _release(task: asyncio.Task[Any]) -> None:
    _driving.discard(task)


def _copy_soon(loop: asyncio.AbstractEventLoop, observer: asyncio.Future[Any],
               future: Future[Any]) -> None:
    """Settles `observer` like `future` (settled): at once on the loop's own thread (a
    settled future's observer is done before the loop runs), else through the loop."""
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    if on_loop:
        _copy(observer, future)
        return
    try:
        loop.call_soon_threadsafe(_copy, observer, future)
    except RuntimeError:  # the loop that asked is closed: nobody observes any more
        pass


def _copy(observer: asyncio.Future[Any], future: Future[Any]) -> None:
    if observer.done():  # cancelled by its owner
        return
    if before_result is not None:
        before_result()
    try:
        observer.set_result(future._resolve())
    except StopIteration as exc:  # an asyncio future cannot hold one
        observer.set_exception(RuntimeError(f"the future raised StopIteration: {exc!r}"))
    except BaseException as exc:  # noqa: BLE001 - the observer's outcome
        observer.set_exception(exc)


def _wake_soon(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[Any]) -> None:
    try:
        loop.call_soon_threadsafe(_wake, waiter)
    except RuntimeError:  # the loop that awaited it is closed: nobody waits any more
        pass


def _wake(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def resolved(value: Any) -> Future[Any]:
    """A future already settled with `value`."""
    fut: Future[Any] = Future._pending()
    fut.set_result(value)
    return fut


def chained(source: Future[Any], transform: Callable[[Any], R]) -> Future[R]:
    """A future of `transform(value of source)`, computed by its first consumer; it fails as
    `source` fails."""
    out: Future[R] = Future._pending()
    source.add_done_callback(
        lambda: out.set_lazy(lambda: transform(source._resolve()), fails=source.failed()))
    return out


def failed(exc: BaseException) -> Future[Any]:
    """A future already settled with `exc`."""
    fut: Future[Any] = Future._pending()
    fut.set_exception(exc)
    return fut


def when_all(futures: Iterable[Future[Any]], *, failures: bool = True,
             into: Future[None] | None = None) -> Future[None]:
    """A future settled (None) once every one of `futures` has settled, at once if there are
    none. With `failures` it then fails as the first of them, in the order given, that failed
    (a failure does not cut the wait short: all have ended when it settles); without, their
    outcomes are ignored. Their values are not computed by the thread that settles the last
    one, but by the first consumer of the result. Waiting observes them: a coroutine's body
    starts now.

    Args:
        into: the future to settle (one with its own way of being waited for), instead of a
            new one.
    """
    futures = list(futures)
    out: Future[None] = Future._pending() if into is None else into
    left = [len(futures)]
    lock = threading.Lock()  # the futures may settle at once, from different threads

    def one_done() -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        if failures and any(f.failed() for f in futures):
            out.set_lazy(lambda: _raise_first(futures), fails=True)
        elif failures:
            out.set_lazy(lambda: _raise_first(futures))
        else:
            out.set_result(None)

    if not futures:
        out.set_result(None)
    for future in futures:
        if future._coro is not None:
            future._start_coro()
        future.add_done_callback(one_done)
    return out


def _raise_first(futures: list[Future[Any]]) -> None:
    """Raises the failure of the first of `futures` (all settled) that failed."""
    for future in futures:
        future._resolve()


class LazyLoop:
    """An asyncio loop running forever on its own daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def get(self) -> asyncio.AbstractEventLoop:
        """The loop (started now if it was not)."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=_run_forever, args=(loop,), name=self._name,
                                 daemon=True).start()
                self._loop = loop
            return self._loop


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


_background = LazyLoop("monarch-futures")


def background_loop() -> asyncio.AbstractEventLoop:
    """A process-wide loop that runs coroutine-backed futures consumed with `.get()`."""
    return _background.get()
