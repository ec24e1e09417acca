"""Actor hosting: one slot per actor in a process, running its messages one at a time.

A sync actor gets its own worker thread; async actors share the process's actor loop thread,
one task each. The I/O thread only enqueues: unpickling, the handler and the reply happen on the
actor's thread, so a slow handler never stalls the process's I/O.
"""

from __future__ import annotations

import asyncio
import collections
import os
import queue
import socket
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any


from ._channel import Port
from . import _instrument
from ._context import Context, Instance, enter, leave
from ._endpoint import endpoint_table
from ._future import LazyLoop
from ._leader import BATON
from ._process import ProcessRuntime
from ._wire import _serial
from ._wire._messages import ERROR, FAILED, OK, Call

_time_ns = time.time_ns
RECENT = 64
"""Messages each actor's flight recorder keeps (the newest handled)."""

STARTING, RUNNING, FAILED_STATE, STOPPED = "starting", "running", "failed", "stopped"
_STOP = object()
PING = object()
"""Queued behind an actor's messages: answer a ping once __init__ has run."""
SUPERVISE = object()
"""Queued behind an actor's messages: offer a failure of a mesh it owns to __supervise__."""


class SpawnHeader:
    """The msgpack header of a spawn message: everything but the pickled class and args."""

    __slots__ = ("mesh", "name", "is_async", "class_name", "owner", "owner_id", "controller")

    def __init__(self, body: dict[str, Any]) -> None:
        self.mesh: str = body["mesh"]
        self.name: str = body["name"]
        self.is_async: bool = body["is_async"]
        self.class_name: str = body["class_name"]
        self.owner: str = body["owner"]
        self.owner_id: str = body["owner_id"]
        self.controller: str = body["controller"]


class ActorSlot:
    """An actor in this process: its mailbox, state, and how it runs messages."""

    def __init__(self, runtime: ProcessRuntime, header: SpawnHeader, view: Any, index: int,
                 frames: list[Any], proc_mesh: Any) -> None:
        self.runtime = runtime
        self.header = header
        self.state = STARTING
        self.failure: str | None = None
        self.handled = 0
        self.obj: Any = None
        self._spec_frames = frames
        self._view = view
        self.index = index
        self.base_rank = view.rank_at(index)
        self.rank = view.point(index)
        self.instance = Instance(
            actor_id=f"{header.mesh}[{self.rank.rank}]", name=f"{header.name}[{self.rank.rank}]",
            class_name=header.class_name, rank=self.rank, proc_id=runtime.identity.name,
            creator=header.owner_id, sender=f"{header.mesh}[{self.rank.rank}]",
            proc_mesh=proc_mesh, slot=self)
        self.endpoints: dict[str, Any] = {}
        self.done = threading.Event()
        """Set once the actor has stopped or failed."""
        self.break_next = False
        """Run the next message under a remote pdb that stops at its first line."""
        # What it runs now and what waits (read, not locked, by the shipper on the I/O thread):
        self.running: dict[int, tuple[Any, ...]] = {}
        """id(msg) -> (method, start_ns, sender, trace, bytes) of each handler running now."""
        self.waiting: deque[str] = deque()
        """Methods of the calls queued behind them, oldest first."""
        self.recent: deque[tuple[Any, ...]] = deque(maxlen=RECENT)
        """The flight recorder: (method, sender, start_ns, end_ns, outcome, bytes), newest last."""
        self.recorded = 0
        """Messages ever put in the flight recorder."""
        self.requested_ns = 0
        """When the spawn was sent (wall clock of the spawner), for ``actor_spawn_seconds``."""

    # -- I/O thread ------------------------------------------------------------------------
    def deliver(self, msg: Call, frames: list[Any]) -> None:
        """Queues a call (I/O thread). Calls to a failed or stopped actor are refused at once."""
        if self.state in (FAILED_STATE, STOPPED):
            self.refuse(msg)
            return
        self.waiting.append(msg.method)
        self._enqueue((msg, frames))

    def refuse(self, msg: Call) -> None:
        """Answers a call with this actor's failure (a SupervisionError at the caller)."""
        _instrument.count_undelivered("actor_" + self.state)
        if msg.port is not None:
            data, _ = _serial.dumps(self.failure or "the actor is not running")
            self.runtime.reply(msg.port, msg.lo, FAILED, [data])

    def request_stop(self, reason: str, port: tuple | None = None) -> None:
        """Stops after the messages already queued; `__cleanup__` runs first."""
        self._enqueue((_STOP, (reason, port)))

    def request_abort(self, reason: str) -> None:
        """Fails the actor with `reason` (from inside a handler)."""
        self.fail(f"actor explicitly aborted due to: {reason}", None)

    # -- the actor's thread ----------------------------------------------------------------
    def construct(self) -> None:
        """Unpickles the class and arguments and runs `__init__`."""
        _instrument.tag_actor(self)
        try:
            frames = self._spec_frames
            cls, args, kwargs = _serial.loads(frames[0].buffer, [f.buffer for f in frames[1:]])
            self._spec_frames = []
            self.endpoints = {name: prop for name, prop in endpoint_table(cls)[0].items()}
            self.plain = set(endpoint_table(cls)[1])
            self.obj = cls.__new__(cls)
            token = enter(Context(self.instance, self._view, self.index))
            try:
                self.obj.__init__(*args, **kwargs)
            finally:
                leave(token)
        except BaseException as exc:  # noqa: BLE001 - any failure of __init__ fails the actor
            self.fail(_aborted(_strip(exc)), exc)
            return
        self.state = RUNNING
        _instrument.actor_spawned(self)

    def prepare(self, msg: Call, frames: list[Any]) -> tuple[Any, tuple, dict, Context] | None:
        """Finds the method and unpickles arguments; answers the caller itself on error."""
        if self.waiting:
            self.waiting.popleft()
        if self.state != RUNNING:
            self.refuse(msg)
            return None
        prop = self.endpoints.get(msg.method)
        try:
            if prop is not None:
                fn = prop._fn
            elif msg.method in self.plain:
                fn = getattr(type(self.obj), msg.method)
            else:
                raise AttributeError(f"{self.header.class_name} has no endpoint {msg.method!r}")
            if frames:
                args, kwargs = _serial.loads(frames[0].buffer, [f.buffer for f in frames[1:]])
            else:
                args, kwargs = (), {}
        except Exception as exc:  # noqa: BLE001 - reported to the caller, actor survives
            if msg.port is None:  # a broadcast nobody can tell: report it, keep the actor
                self.runtime.internal_errors += 1
                _instrument.count_undelivered("undecodable")
                print(f"monarch: dropped a message to {self.instance.name}.{msg.method}: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)
                return None
            self.answer_error(msg, exc)
            return None
        if prop is not None and prop._explicit_response_port:
            port = msg.port
            args = (Port(port[0], port[1], msg.lo) if port else _NullPort(), *args)
        return fn, args, kwargs, Context(self.instance, msg.view, msg.lo, self.runtime.view)

    def begin(self, msg: Call, frames: list[Any], ctx: Context) -> tuple[Any, Any, float]:
        """Enters the message's context and opens its invocation span."""
        token = enter(ctx)
        nbytes = sum(map(len, frames)) if frames else 0
        span = _instrument.invocation_span(self, msg, nbytes) if _instrument.ENABLED else None
        self.running[id(msg)] = (msg.method, _time_ns(), msg.sender, msg.trace, nbytes)
        return token, span, time.perf_counter()

    def finish(self, msg: Call, begun: tuple[Any, Any, float], result: Any = None,
               error: BaseException | None = None) -> None:
        """Answers the caller (or fails the actor), closes the span, leaves the context."""
        token, span, started = begun
        try:
            if error is None:
                self.answer(msg, result)
            else:
                self.answer_error(msg, error)
        finally:
            outcome = "ok" if error is None else "error"
            if span is not None:
                _instrument.end_invocation(self, msg, span, started, outcome)
            method, start, sender, _, nbytes = self.running.pop(id(msg))
            self.recent.append((method, sender, start, _time_ns(), outcome, nbytes))
            self.recorded += 1
            leave(token)

    def explicit(self, msg: Call) -> bool:
        prop = self.endpoints.get(msg.method)
        return prop is not None and prop._explicit_response_port

    def answer(self, msg: Call, result: Any) -> None:
        """Sends the handler's result to the caller (if it waits for one)."""
        self.handled += 1
        if msg.port is None or self.explicit(msg):
            return
        if result is None:
            self.runtime.reply(msg.port, msg.lo, OK)
            return
        try:
            data, buffers = _serial.dumps(result)
        except Exception as exc:  # noqa: BLE001 - the caller learns why, the actor survives
            self.answer_error(msg, _unpicklable("result", msg, exc))
            return
        self.runtime.reply(msg.port, msg.lo, OK, [data, *buffers])

    def answer_error(self, msg: Call, exc: BaseException) -> None:
        """Sends an endpoint's exception to the caller; for a broadcast, fails the actor."""
        self.handled += 1
        if msg.port is None:
            self.fail(_aborted(exc), exc)
            return
        _instrument.count_failure("user")
        tb = _format(exc)
        try:
            data, buffers = _serial.dumps((exc, tb))
        except Exception:  # noqa: BLE001 - the exception itself does not pickle
            data, buffers = _serial.dumps((RuntimeError(f"{type(exc).__name__}: {exc}"), tb))
        self.runtime.reply(msg.port, msg.lo, ERROR, [data, *buffers])

    def fail(self, reason: str, exc: BaseException | None) -> None:
        """Marks the actor failed and reports it to the controller (which tells the owner)."""
        if self.state in (FAILED_STATE, STOPPED):
            return
        self.state = FAILED_STATE
        _instrument.count_failure("user")
        self.failure = (f"The actor {self.label()} and all its descendants have failed:\n"
                        f"  {_indent(reason)}")
        report = {"mesh": self.header.mesh, "mesh_name": self.header.name,
                  "rank": self.rank.rank, "base_rank": self.base_rank,
                  "class_name": self.header.class_name, "owner": self.header.owner,
                  "owner_id": self.header.owner_id, "report": self.failure,
                  "reason": reason, "host": socket.gethostname(), "pid": os.getpid(),
                  "proc": self.runtime.identity.name}
        self.done.set()
        self.runtime.notify(self.header.controller, "actor_failed", report)

    def finish_stop(self, reason: str, port: tuple | None) -> None:
        """Runs `__cleanup__` and marks the actor stopped; answers `port` when done."""
        cleanup = getattr(self.obj, "__cleanup__", None)
        if cleanup is not None and self.state == RUNNING:
            try:
                cleanup(None)
            except Exception:  # noqa: BLE001 - a failing cleanup must not block the stop
                traceback.print_exc()
        if self.state not in (FAILED_STATE, STOPPED):
            self.state = STOPPED
            self.failure = (f"The actor {self.label()} and all its descendants have failed:\n"
                            f"  {reason}")
            self.runtime.notify(self.header.controller, "actor_stopped",
                                {"mesh": self.header.mesh, "rank": self.rank.rank})
        self.done.set()
        if port is not None:
            self.runtime.reply(port, self.index, OK)

    def special(self, kind: Any, arg: Any) -> None:
        """Runs a system item queued behind the actor's messages (on the actor's thread)."""
        if kind is PING:
            port, index = arg
            if self.state == RUNNING:
                self.runtime.reply(port, index, OK)
            else:
                data, _ = _serial.dumps(self.failure or "the actor is not running")
                self.runtime.reply(port, index, FAILED, [data])
        elif kind is SUPERVISE:
            self.supervise(arg)

    def supervise(self, failure: Any) -> None:
        """Offers a failure of a mesh this actor owns to `__supervise__`; escalates if unhandled."""
        from ._supervision import MeshFailure

        if self.state != RUNNING:
            return
        event = MeshFailure.from_report(failure)
        token = enter(Context(self.instance, None, 0, self.runtime.view))
        try:
            handled = bool(self.obj.__supervise__(event))
        except Exception as exc:  # noqa: BLE001 - a failing supervisor fails its actor
            self.fail(f"__supervise__ raised while handling a failure of {event.mesh_name}:\n"
                      f"{_format(exc)}", exc)
            return
        finally:
            leave(token)
        if not handled:
            self.fail(f"a mesh it owns failed and it did not handle it:\n{event.report()}", None)

    def label(self) -> str:
        owner = "<root>" if self.header.owner_id == "root" else f"<{self.header.owner_id}>"
        return f"{owner}.<{self.header.class_name} {self.header.name}{self.rank!r}>"

    def enqueue_special(self, kind: Any, arg: Any) -> None:
        """Queues a system item (ping, supervise) behind the messages already queued."""
        if self.state in (FAILED_STATE, STOPPED):
            self.special(kind, arg)  # nothing runs the queue any more
            return
        self._enqueue((kind, arg))

    def _enqueue(self, item: tuple[Any, Any]) -> None:
        raise NotImplementedError

    def queue_depth(self) -> int:
        """Messages waiting in this actor's queue (approximate, any thread)."""
        return 0


class SyncSlot(ActorSlot):
    """A sync actor: its own thread runs `__init__` then each message in order."""

    def start(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._local: collections.deque[Any] = collections.deque()
        self.leading = False
        threading.Thread(target=self._run, name=f"actor-{self.instance.name}",
                         daemon=True).start()

    def queue_depth(self) -> int:
        return self._queue.qsize() + len(self._local)

    def _enqueue(self, item: tuple[Any, Any]) -> None:
        self._queue.put(item)
        if self.leading and threading.get_ident() != self.runtime.leadership.leader_ident:
            self.runtime.wake()

    def _next(self) -> Any:
        """The next item; while idle, this thread leads the process's loop (no hand-off for
        the messages it receives for itself)."""
        q, local, lead = self._queue, self._local, self.runtime.leadership
        wanting = False
        while True:
            if local:
                item = local.popleft()
            else:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    if not wanting and self.runtime.can_lead():
                        if lead.want(q):
                            self._lead(q)
                            continue
                        wanting = True
                    item = q.get()
            if item is not BATON:
                if wanting:
                    lead.cancel(q, local)
                return item
            wanting = False
            if local or not q.empty():
                lead.release(q)
                continue
            self._lead(q)

    def _lead(self, q: "queue.SimpleQueue[Any]") -> None:
        self.leading = True
        try:
            self.runtime.lead(q, lambda: not q.empty(), None)
        finally:
            self.leading = False

    def _run(self) -> None:
        self.construct()
        while True:
            msg, frames = self._next()
            if msg is _STOP:
                self.finish_stop(*frames)
                self._drain_refusing()
                return
            if msg is PING or msg is SUPERVISE:
                self.special(msg, frames)
                continue
            prepared = self.prepare(msg, frames)
            if prepared is None:
                continue
            fn, args, kwargs, ctx = prepared
            begun = self.begin(msg, frames, ctx)
            try:
                if self.break_next:
                    self.break_next = False
                    from ._debug import run_breaking

                    result = run_breaking(fn, self.obj, *args, **kwargs)
                else:
                    result = fn(self.obj, *args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - goes to the caller or fails the actor
                self.finish(msg, begun, error=_strip(exc))
            else:
                self.finish(msg, begun, result)

    def _drain_refusing(self) -> None:
        while True:
            try:
                msg, _ = self._local.popleft() if self._local else self._queue.get_nowait()
            except queue.Empty:
                return
            if msg is PING:
                self.special(msg, _)
            elif msg is not _STOP and msg is not SUPERVISE:
                self.refuse(msg)


class AsyncSlot(ActorSlot):
    """An async actor: one task on the process's actor loop."""

    def start(self) -> None:
        self._loop = actor_loop()
        self._pending: collections.deque[tuple[Any, Any]] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._loop.call_soon_threadsafe(self._begin)

    def _begin(self) -> None:
        self._wakeup = asyncio.Event()
        self._loop.create_task(self._run())

    def queue_depth(self) -> int:
        return len(self._pending)

    def _enqueue(self, item: tuple[Any, Any]) -> None:
        self._pending.append(item)
        self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _run(self) -> None:
        self.construct()
        pending = self._pending
        assert self._wakeup is not None
        while True:
            while not pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            msg, frames = pending.popleft()
            if msg is _STOP:
                self.finish_stop(*frames)
                while pending:
                    item, arg = pending.popleft()
                    if item is PING:
                        self.special(item, arg)
                    elif item is not _STOP and item is not SUPERVISE:
                        self.refuse(item)
                return
            if msg is PING or msg is SUPERVISE:
                self.special(msg, frames)
                continue
            prepared = self.prepare(msg, frames)
            if prepared is None:
                continue
            prop = self.endpoints.get(msg.method)
            if prop is not None and prop._concurrent:
                self._loop.create_task(self._handle(msg, prepared, frames))
            else:
                await self._handle(msg, prepared, frames)

    async def _handle(self, msg: Call, prepared: tuple[Any, tuple, dict, Context],
                      frames: list[Any]) -> None:
        fn, args, kwargs, ctx = prepared
        begun = self.begin(msg, frames, ctx)
        try:
            result = fn(self.obj, *args, **kwargs)
            if asyncio.iscoroutine(result):
                result = await result
        except BaseException as exc:  # noqa: BLE001 - goes to the caller or fails the actor
            self.finish(msg, begun, error=_strip(exc))
        else:
            self.finish(msg, begun, result)


class _NullPort:
    """The response port of a broadcast to an explicit-port endpoint: answers go nowhere."""

    def send(self, obj: Any) -> None:
        pass

    def exception(self, obj: BaseException) -> None:
        pass


_actors_loop = LazyLoop("monarch-actors")


def actor_loop() -> asyncio.AbstractEventLoop:
    """The process's loop for async actors (not the futures' loop: an actor blocking on a
    coroutine future must not wait on its own loop)."""
    return _actors_loop.get()


def _strip(exc: BaseException) -> BaseException:
    """Drops the runtime's own frame from the traceback, so it starts at the user's code."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        exc.__traceback__ = tb.tb_next
    return exc


def _aborted(exc: BaseException) -> str:
    """Monarch's words for an actor killed by an exception (in __init__ or a broadcast)."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "actor explicitly aborted due to: " + "".join(lines).rstrip("\n")


def _indent(text: str) -> str:
    """Indents the lines after the first by two spaces (failure reports nest reasons)."""
    return text.replace("\n", "\n  ")


def _format(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    if lines and lines[0].startswith("Traceback"):
        lines = lines[1:]
    return "".join(lines).rstrip("\n")


def _unpicklable(what: str, msg: Call, exc: BaseException) -> BaseException:
    from ._errors import UnpicklableError

    return UnpicklableError(f"could not pickle the {what} of {msg.method}: "
                            f"{type(exc).__name__}: {exc}")
