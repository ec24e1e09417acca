"""Actor hosting: one slot per actor in a process, running its messages one at a time.

A sync actor gets its own worker thread; an async actor gets a loop thread of its own, running
one dispatch task (and a task per concurrent handler). The I/O thread only enqueues: unpickling, the handler and the reply happen on the
actor's thread, so a slow handler never stalls the process's I/O.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
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
from .._runtime import _gather, _instrument
from .._runtime._context import Context, Creator, Instance, actor_label, enter, leave
from .._runtime._errors import actor_failure_report, remote_traceback
from .._runtime._future import when_all
from ._endpoint import endpoint_table
from .._runtime._leader import BATON
from .._runtime._process_runtime import ProcessRuntime
from .._wire import _serial
from .._wire._messages import ERROR, FAILED, OK, Call
from ..telemetry import begin_invocation, end_invocation

_time_ns = time.time_ns
UNSHIPPED = 20480
"""Flight-recorder entries an actor holds until the process's telemetry takes them (every
`_runtime._instrument.SHIP_S`, 0.25 s, `actor_sampler`: 81,920 a second, as 8,192 every 0.1 s
were before the looks were spaced); past it a new entry is dropped and counted
(``telemetry_dropped{kind="message"}``). A ring of the newest 64 lost the oldest, uncounted,
once an actor handled over ~640 messages a second (an endurance loop on a fast machine lost
1-4 % of its flight records that way)."""

STARTING, RUNNING, FAILED_STATE, STOPPED = "starting", "running", "failed", "stopped"
_STOP = object()
PING = object()
"""Queued behind an actor's messages: answer a ping once __init__ has run."""
_CONTROL = object()
"""Queued to wake a sync actor's thread: its control lane has work."""


class SpawnHeader:
    """The msgpack header of a spawn message: everything but the pickled class and args."""

    __slots__ = ("mesh", "name", "is_async", "class_name", "owner", "owner_id", "owner_label",
                 "owner_name", "owner_class", "controller")

    def __init__(self, body: dict[str, Any]) -> None:
        self.mesh: str = body["mesh"]
        self.name: str = body["name"]
        self.is_async: bool = body["is_async"]
        self.class_name: str = body["class_name"]
        self.owner: str = body["owner"]
        self.owner_id: str = body["owner_id"]
        self.owner_label: str = body.get("owner_label", "<root>")
        self.owner_name: str = body.get("owner_name", "root")
        self.owner_class: str | None = body.get("owner_class")
        self.controller: str = body["controller"]


class ActorSlot:
    """An actor in this process: its mailbox, state, and how it runs messages.

    Two lanes feed an actor: its messages, in order, and a control lane (failures of meshes
    it owns, for `__supervise__`) that is served first, between messages, so a backlog of
    messages never starves supervision. An async `__supervise__` runs as a task of its own
    while the actor keeps handling messages.
    """

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
            creator=Creator(header.owner_name, header.owner_class, header.owner_label),
            sender=f"{header.mesh}[{self.rank.rank}]",
            proc_mesh=proc_mesh, slot=self, label=self.label())
        self.endpoints: dict[str, Any] = {}
        self.answering: frozenset[str] = frozenset()
        """The endpoints that answer through an explicit response port (read per message)."""
        self._contexts: dict[tuple[Any, int], Context] = {}
        """The context of a message, by (view, index): the same for every call of a cast."""
        self.done = threading.Event()
        """Set once the actor has stopped or failed."""
        self.thread: threading.Thread | None = None
        """The thread that runs it (set by `start`)."""
        self.break_next = False
        """Run the next message under a remote pdb that stops at its first line."""
        self._control: collections.deque[dict[str, Any]] = collections.deque()
        """Failures of owned meshes waiting for `__supervise__` (appended by the I/O thread)."""
        self.lifecycle: collections.deque[tuple[int, str, str]] = collections.deque(
            ((_time_ns(), "created", ""),))
        """(time_ns, event, reason) of each step of its life not yet shipped: created,
        initializing, running, stopping, then stopped or failed (the shipper takes them)."""
        self._stopping = False
        """A stop was requested: failures not yet taken for `__supervise__` are dropped."""
        self._initialized = False
        """`__init__` returned: `__cleanup__` runs when the actor ends (stopped or failed)."""
        self._cleaned = False
        self._fail_exc: BaseException | None = None
        self._fail_reason = ""
        """The exception that failed the actor (given to `__cleanup__`)."""
        self._inflight: list[Call] = []
        """Calls being handled now; a failure of the actor answers them at once."""
        self._lock = threading.Lock()  # guards state changes to failed/stopped and _inflight
        self._owned: list[Any] = []
        """Meshes (actor and proc) this actor spawned: its descendants, stopped with it."""
        # What it runs now and what waits (read, not locked, by the shipper on the I/O thread):
        self.running: dict[int, tuple[Any, ...]] = {}
        """id(msg) -> (method, start_ns, sender, trace, bytes, sent_hlc) of each handler
        running now (sent_hlc: the sender's clock when it sent the message)."""
        self.waiting: deque[str] = deque()
        """Methods of the calls queued behind them, oldest first."""
        self.unshipped: deque[tuple[Any, ...]] = deque()
        """The flight recorder's entries not shipped yet: (method, sender, start_ns, end_ns,
        outcome, bytes, sent_hlc), newest last; appended by the actor's thread, taken from the
        left by the sampler (both thread-safe on a deque)."""
        self.recorded = 0
        """Messages ever put in the flight recorder."""
        self._sites: dict[str, Any] = {}
        """method -> its invocation span site (`_instrument.invocation_site`), made once."""
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
        """Stops after the messages already queued; `__cleanup__` runs first. Failures of
        owned meshes not yet taken for `__supervise__` are dropped (as in Monarch)."""
        if not self._stopping and self.state not in (FAILED_STATE, STOPPED):
            self.lifecycle.append((_time_ns(), "stopping", reason))
        self._stopping = True
        self._control.clear()
        self._enqueue((_STOP, (reason, port)))

    def request_abort(self, reason: str | None) -> None:
        """Fails the actor with `reason` (from inside a handler)."""
        self.fail(f"actor explicitly aborted due to: {reason or 'no reason provided'}", None)

    def supervise_later(self, failure: dict[str, Any]) -> None:
        """Queues a failure of a mesh this actor owns on the control lane (I/O thread)."""
        if self.state in (FAILED_STATE, STOPPED) or self._stopping:
            return
        self._control.append(failure)
        self._wake_control()

    def _wake_control(self) -> None:
        raise NotImplementedError

    def _wake_driver(self) -> None:
        """Wakes the actor's driver (it may be waiting for a message) after a failure."""
        self._wake_control()

    # -- the actor's thread ----------------------------------------------------------------
    def construct(self) -> None:
        """Unpickles the class and arguments and runs `__init__`."""
        self.lifecycle.append((_time_ns(), "initializing", ""))
        _instrument.tag_actor(self)
        try:
            frames = self._spec_frames
            cls, args, kwargs = _serial.loads(frames[0].buffer, [f.buffer for f in frames[1:]])
            self._spec_frames = []
            self.endpoints = {name: prop for name, prop in endpoint_table(cls)[0].items()}
            self.answering = frozenset(name for name, prop in self.endpoints.items()
                                       if prop._explicit_response_port)
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
        self._initialized = True
        with self._lock:
            if self.state == STARTING:
                self.state = RUNNING
                self.lifecycle.append((_time_ns(), "running", ""))
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
                if not self.header.is_async and inspect.iscoroutinefunction(fn):
                    raise TypeError(f"{self.header.class_name}.{msg.method} is an async def "
                                    "method: a sync actor has no event loop to run it "
                                    "(make it a plain def, or the actor async)")
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
        try:
            ctx = self._contexts.get((msg.view, msg.lo))
        except TypeError:  # a view that does not hash (a malformed call): its own context
            return fn, args, kwargs, Context(self.instance, msg.view, msg.lo, self.runtime.view)
        return fn, args, kwargs, ctx if ctx is not None else self._context(msg.view, msg.lo)

    def _context(self, view: Any, index: int) -> Context:
        """The context of messages to `index` of `view`, made once (`prepare` looks it up
        first): a Context is the same for every call of one cast shape, and only works out
        its point, once, when asked."""
        contexts = self._contexts
        if len(contexts) >= 256:
            contexts.clear()
        ctx = contexts[(view, index)] = Context(self.instance, view, index, self.runtime.view)
        return ctx

    def begin(self, msg: Call, frames: list[Any], ctx: Context) -> tuple[Any, Any, float]:
        """Enters the message's context and opens its invocation span."""
        token = enter(ctx)
        nbytes = sum(map(len, frames)) if frames else 0
        if _instrument.ENABLED:
            site = self._sites.get(msg.method) or self._site(msg.method)
            span = begin_invocation(site, msg.trace, nbytes)  # child of the caller's span
        else:
            span = None
        self.running[id(msg)] = (msg.method, _time_ns(), msg.sender, msg.trace, nbytes,
                                 msg.hlc)
        self._inflight.append(msg)
        return token, span, time.perf_counter()

    def finish(self, msg: Call, begun: tuple[Any, Any, float], result: Any = None,
               error: BaseException | None = None, dropped: bool = False) -> None:
        """Answers the caller (or fails the actor), closes the span, leaves the context.

        An exception goes back to the caller as an ActorError, and the actor lives on, only
        when the caller waits for an answer on the call's own port. Anything else fails the
        actor (a supervision event; the caller, if any, gets a SupervisionError): a
        `BaseException` that is not an `Exception`, or an exception of a `broadcast` (no
        reply port) or of an endpoint that answers through an explicit response port.
        """
        token, span, started = begun
        try:
            with self._lock:
                answering = msg in self._inflight
                if answering:
                    self._inflight.remove(msg)
            if not answering:
                return  # the actor failed meanwhile: the caller was answered then
            if dropped:  # ended by the actor's own stop: its caller hears of the stop
                self.refuse(msg)
            elif error is None:
                self.answer(msg, result)
            elif isinstance(error, Exception) and msg.port is not None \
                    and not self.explicit(msg):
                self.answer_error(msg, error)
            else:
                self.handled += 1
                self.fail(_aborted(error), error)
                self.refuse(msg)
        finally:
            outcome = "cancelled" if dropped else "ok" if error is None else "error"
            if span is not None:  # counts the message, its latency and its bytes
                end_invocation(span, outcome)
            method, start, sender, _, nbytes, sent = self.running.pop(id(msg))
            if len(self.unshipped) < UNSHIPPED:
                self.unshipped.append((method, sender, start, _time_ns(), outcome, nbytes,
                                       sent))
            else:
                _instrument.count_dropped("message")
            self.recorded += 1
            leave(token)

    def _site(self, method: str) -> Any:
        site = self._sites[method] = _instrument.invocation_site(self, method)
        return site

    def explicit(self, msg: Call) -> bool:
        return msg.method in self.answering

    def answer(self, msg: Call, result: Any) -> None:
        """Sends the handler's result to the caller (if it waits for one)."""
        self.handled += 1
        if msg.port is None or msg.method in self.answering:  # `explicit`, inline
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
        """Sends an endpoint's exception to the caller (an ActorError there)."""
        self.handled += 1
        if msg.port is None:
            return
        _instrument.count_failure("user")
        data, buffers = _serial.dumps_exception(exc, remote_traceback(exc))
        self.runtime.reply(msg.port, msg.lo, ERROR, [data, *buffers])

    def fail(self, reason: str, exc: BaseException | None) -> None:
        """Marks the actor failed and reports it to the controller (which tells the owner);
        the calls it is handling now get the failure at once."""
        with self._lock:
            if self.state in (FAILED_STATE, STOPPED):
                return
            self.state = FAILED_STATE
            self.failure = actor_failure_report(self.label(), reason)
            self._fail_exc = exc
            self._fail_reason = reason
            inflight, self._inflight = self._inflight, []
            if not self._stopping:
                self.lifecycle.append((_time_ns(), "stopping", reason))
        self._control.clear()
        _instrument.count_failure("user")
        report = {"mesh": self.header.mesh, "mesh_name": self.header.name,
                  "rank": self.rank.rank, "base_rank": self.base_rank,
                  "class_name": self.header.class_name, "owner": self.header.owner,
                  "owner_id": self.header.owner_id, "report": self.failure,
                  "label": self.label(), "reason": reason, "host": socket.gethostname(),
                  "pid": os.getpid(), "proc": self.runtime.identity.name}
        if report["owner_id"] != "root":
            # The owner hears before any caller is refused, on the same link when the caller
            # is the owner: a call that raised SupervisionError finds `__supervise__` queued.
            self.runtime.notify(report["owner"], "supervise", dict(report, time=time.time()))
            report["owner_told"] = True
        for msg in inflight:
            self.refuse(msg)
        self.done.set()
        self._cancel_tasks()
        self.stop_descendants()  # "and all its descendants": what it spawned goes with it
        self.runtime.notify(self.header.controller, "actor_failed", report)
        self._wake_driver()  # its driver runs `__cleanup__` and ends

    def own(self, mesh: Any) -> None:
        """Records a mesh this actor spawned (any thread); forgets the stopped ones."""
        self._owned = [m for m in self._owned if not _stopped(m)]
        self._owned.append(mesh)

    def stop_descendants(self) -> list[Any]:
        """Stops every mesh this actor spawned (actor meshes first, then proc meshes); the
        stops' futures."""
        owned, self._owned = self._owned, []
        # a mesh says when it stops (`_STOP_ORDER`: actor meshes 0, proc meshes 1); stable
        meshes = sorted(owned, key=lambda m: getattr(m, "_STOP_ORDER", 1))
        futures = []
        for mesh in meshes:
            try:
                futures.append(mesh.stop())
            except Exception:  # noqa: BLE001 - a descendant already gone stops nothing
                pass
        return futures

    def _cancel_tasks(self) -> None:
        """Cancels what runs on the actor's behalf besides its handler (async actors)."""

    def _mark_stopped(self, reason: str) -> None:
        with self._lock:
            if self.state in (FAILED_STATE, STOPPED):
                return
            self.state = STOPPED
            self.failure = actor_failure_report(self.label(), reason)
            self.lifecycle.append((_time_ns(), "stopped", reason))
        self._control.clear()
        self.runtime.notify(self.header.controller, "actor_stopped",
                            {"mesh": self.header.mesh, "rank": self.rank.rank})

    def ended_failed(self) -> None:
        """Notes the end of a failed actor (its cleanup ran), with the reason it failed."""
        self.lifecycle.append((_time_ns(), "failed", self._fail_reason))

    def cleanup(self) -> Any:
        """Calls `__cleanup__` once, if `__init__` had returned: with None when the actor
        stops, with the exception that failed it otherwise (it may return a coroutine)."""
        cleanup = getattr(self.obj, "__cleanup__", None)
        if cleanup is None or not self._initialized or self._cleaned:
            return None
        self._cleaned = True
        token = enter(Context(self.instance, None, 0, self.runtime.view))
        try:
            return cleanup(self._fail_exc if self.state == FAILED_STATE else None)
        finally:
            leave(token)

    def stopped(self, reason: str, port: tuple | None) -> None:
        """Marks the actor stopped after its cleanup; answers `port` when done."""
        self._mark_stopped(reason)
        self.done.set()
        if port is not None:
            self.runtime.reply(port, self.index, OK)

    def ping(self, arg: Any) -> None:
        """Answers a ping queued behind the messages: ready once `__init__` ran."""
        port, index = arg
        if self.state == RUNNING:
            self.runtime.reply(port, index, OK)
        else:
            data, _ = _serial.dumps(self.failure or "the actor is not running")
            self.runtime.reply(port, index, FAILED, [data])

    def take_control(self) -> list[Any]:
        """The failures waiting for `__supervise__`, as events (empty before `__init__` ran)."""
        from ._supervision import MeshFailure

        if self.state != RUNNING or self._stopping:
            self._control.clear()
            return []
        events = []
        while self._control:
            events.append(MeshFailure.from_report(self._control.popleft()))
        return events

    def supervise_context(self) -> Any:
        return enter(Context(self.instance, None, 0, self.runtime.view))

    def supervised(self, event: Any, handled: Any = None,
                   error: BaseException | None = None) -> None:
        """What `__supervise__` said of `event`: handled, not (escalate), or it raised."""
        if error is not None:
            self.fail(f"__supervise__ raised while handling a failure of {event.mesh_name}:\n"
                      f"{remote_traceback(error)}", error)
        elif not handled:
            self.fail(f"a mesh it owns failed and it did not handle it:\n{event.report()}",
                      None)

    def label(self) -> str:
        return actor_label(self.header.owner_label, self.header.class_name, self.header.name,
                           self.rank)

    def enqueue_ping(self, arg: Any) -> None:
        """Queues a ping behind the messages already queued."""
        if self.state in (FAILED_STATE, STOPPED):
            self.ping(arg)  # nothing runs the queue any more
            return
        self._enqueue((PING, arg))

    def _enqueue(self, item: tuple[Any, Any]) -> None:
        raise NotImplementedError

    def died(self, exc: BaseException) -> None:
        """The actor's thread met an error of the runtime itself (user code's errors are
        handled where they are raised): the actor fails with its traceback, and what waits
        in its queue is answered with the failure. Its thread never ends silently, leaving
        callers to wait for answers nobody will give."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        print(f"monarch: internal error in the thread of {self.label()}:\n{text}",
              file=sys.stderr, flush=True)
        try:
            self.fail(f"internal error of the monarch runtime in the actor's thread:\n{text}",
                      exc)
            self.ended_failed()
        finally:
            current, self._current = self._current, None
            if isinstance(current, Call):  # taken from the queue, maybe never answered
                self.refuse(current)
            self._refuse_queued()

    def _refuse_queued(self) -> None:
        """Answers what waits in the queue with the actor's failure (nothing will run it)."""
        raise NotImplementedError

    _current: Any = None
    """The message the actor's thread took last (`died` answers it)."""

    def queue_depth(self) -> int:
        """Messages waiting in this actor's queue (approximate, any thread)."""
        return 0


class SyncSlot(ActorSlot):
    """A sync actor: its own thread runs `__init__` then each message in order; the control
    lane is served before each message."""

    def start(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._local: collections.deque[Any] = collections.deque()
        self.leading = False
        self.idle = False
        """This slot's thread waits for its next message (in `_next`, leading the loop or
        not): a message delivered now is taken at once (`ProcessRuntime.imminent`)."""
        self.taken = 0
        """Items its thread took off its queue (written by that thread only)."""
        self.thread = threading.Thread(target=self._run, name=f"actor-{self.instance.name}",
                                       daemon=True)
        self.thread.start()

    def queue_depth(self) -> int:
        return self._queue.qsize() + len(self._local)

    def _enqueue(self, item: tuple[Any, Any]) -> None:
        if self.idle:
            self.runtime.imminent.add(self)
        self._queue.put(item)
        if self.leading and threading.get_ident() != self.runtime.leadership.leader_ident:
            self.runtime.wake()

    def _wake_control(self) -> None:
        self._enqueue((_CONTROL, None))

    def _next(self) -> Any:
        """The next item; while idle, this thread leads the process's loop (no hand-off for
        the messages it receives for itself)."""
        q, local, lead = self._queue, self._local, self.runtime.leadership
        wanting = False
        while True:
            if local:
                item = local.popleft()
            elif not q.empty():  # this thread is q's only reader: asking beats an Empty raised
                item = q.get_nowait()
            else:
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
            self.runtime.lead(q, lambda: not q.empty(), None, _gather.ANY)
        finally:
            self.leading = False

    def _supervise_now(self) -> None:
        for event in self.take_control():
            token = self.supervise_context()
            try:
                handled = self.obj.__supervise__(event)
            except Exception as exc:  # noqa: BLE001 - a failing supervisor fails its actor
                self.supervised(event, error=exc)
            else:
                self.supervised(event, handled)
            finally:
                leave(token)

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - the runtime's own fault, not the user's
            self.idle = False
            self.runtime.took(self)  # nothing held waits for this thread
            self.died(exc)

    def _refuse_queued(self) -> None:
        self._drain_refusing()

    def _serve(self) -> None:
        self.construct()
        while True:
            if self.state == FAILED_STATE:  # it runs no further message: cleanup, then end
                try:
                    self.cleanup()
                except Exception:  # noqa: BLE001 - the actor has failed already
                    traceback.print_exc()
                self.ended_failed()
                self._drain_refusing()
                return
            if self._control:
                self._supervise_now()
            # what the last message held (its frames, arguments, result) goes before the wait
            # for the next, not when the next comes: an idle actor kept its last 64 MiB
            # argument, and the next big message had to fault in fresh memory of its own
            msg = frames = prepared = fn = args = kwargs = begun = result = None
            self.idle = True
            msg, frames = self._next()
            self.idle = False
            self.taken += 1
            self.runtime.took(self)
            self._current = msg
            if msg is _CONTROL:
                continue
            if msg is _STOP:
                try:
                    self.cleanup()
                except Exception:  # noqa: BLE001 - a failing cleanup must not block the stop
                    traceback.print_exc()
                try:  # a descendant that does not stop in time is left
                    when_all(self.stop_descendants(), failures=False).get(_DESCENDANTS_S)
                except TimeoutError:
                    pass
                self.stopped(*frames)
                self._drain_refusing()
                return
            if msg is PING:
                self.ping(frames)
                continue
            prepared = self.prepare(msg, frames)
            if prepared is None:
                continue
            fn, args, kwargs, ctx = prepared
            begun = self.begin(msg, frames, ctx)
            prepared = frames = None
            try:
                if self.break_next:
                    self.break_next = False
                    from ._debug import run_breaking

                    result = run_breaking(fn, self.obj, *args, **kwargs)
                else:
                    result = fn(self.obj, *args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - goes to the caller or fails the actor
                args = kwargs = None  # freed before the answer (see `_handle`)
                self.finish(msg, begun, error=_strip(exc))
            else:
                args = kwargs = None  # freed before the answer (see `_handle`)
                self.finish(msg, begun, result)

    def _drain_refusing(self) -> None:
        while True:
            try:
                msg, arg = self._local.popleft() if self._local else self._queue.get_nowait()
            except queue.Empty:
                return
            if msg is PING:
                self.ping(arg)
            elif msg is not _STOP and msg is not _CONTROL:
                self.refuse(msg)


class AsyncSlot(ActorSlot):
    """An async actor: a loop thread of its own (as Monarch's: an actor blocking its loop,
    in `__init__` or a handler, blocks no other actor) running one dispatch task;
    `@concurrent_endpoint` handlers and async `__supervise__` calls run as tasks of their own.
    The loop ends once the actor has stopped or failed and its tasks are done."""

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=_run_loop, args=(self._loop,),
                                       name=f"actor-{self.instance.name}", daemon=True)
        self.thread.start()
        self._pending: collections.deque[tuple[Any, Any]] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        """Concurrent handlers and async __supervise__ calls: cancelled when the actor ends."""
        self._loop.call_soon_threadsafe(self._begin)

    def _begin(self) -> None:
        self._wakeup = asyncio.Event()
        self._loop.create_task(self._run_guarded())

    async def _run_guarded(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise  # the loop is going away with the process
        except BaseException as exc:  # noqa: BLE001 - the runtime's own fault, not the user's
            self.died(exc)
            self._loop.stop()

    def _refuse_queued(self) -> None:
        self._answer_pending()

    def queue_depth(self) -> int:
        return len(self._pending)

    def _enqueue(self, item: tuple[Any, Any]) -> None:
        self._pending.append(item)
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the actor stopped and its loop ended: nothing reads the queue
            self._pending.remove(item)
            kind, arg = item
            if kind is PING:
                self.ping(arg)
            elif kind is _STOP:
                _, port = arg
                if port is not None:
                    self.runtime.reply(port, self.index, OK)
            else:
                self.refuse(kind)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _wake_control(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._supervise_now)
        except RuntimeError:  # the loop ended with the actor
            self._control.clear()

    def _wake_driver(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop ended with the actor
            pass

    def _spawn(self, coro: Any) -> "asyncio.Task[Any]":
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _cancel_tasks(self) -> None:
        def cancel() -> None:
            for task in list(self._tasks):
                task.cancel()

        if threading.get_ident() == _loop_thread(self._loop):
            cancel()
        else:
            self._loop.call_soon_threadsafe(cancel)

    def _supervise_now(self) -> None:
        """On the loop: a sync `__supervise__` runs here and now (between messages); an async
        one becomes a task, so the actor keeps handling messages while it is pending."""
        for event in self.take_control():
            token = self.supervise_context()
            try:
                outcome = self.obj.__supervise__(event)
            except Exception as exc:  # noqa: BLE001 - a failing supervisor fails its actor
                self.supervised(event, error=exc)
                continue
            finally:
                leave(token)
            if asyncio.iscoroutine(outcome):
                self._spawn(self._supervise_async(event, outcome))
            else:
                self.supervised(event, outcome)

    async def _supervise_async(self, event: Any, pending: Any) -> None:
        token = self.supervise_context()
        try:
            handled = await pending
        except asyncio.CancelledError as exc:
            if self.state == RUNNING and not _cancelling():
                self.supervised(event, error=exc)  # it raised CancelledError itself
            else:
                raise  # the actor stopped or failed: a pending supervise is dropped
        except Exception as exc:  # noqa: BLE001 - a failing supervisor fails its actor
            self.supervised(event, error=exc)
        else:
            if self.state == RUNNING:
                self.supervised(event, handled)
        finally:
            leave(token)

    async def _run(self) -> None:
        self.construct()
        self._supervise_now()  # failures that arrived during __init__
        pending = self._pending
        assert self._wakeup is not None
        while True:
            msg = frames = prepared = None  # let go of the last message first (`SyncSlot`)
            while not pending and self.state != FAILED_STATE:
                self._wakeup.clear()
                await self._wakeup.wait()
            if self.state == FAILED_STATE:  # it runs no further message: cleanup, then end
                await self._end_failed()
                return
            msg, frames = pending.popleft()
            self._current = msg
            if msg is _STOP:
                await self._stop(*frames)
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
                self._loop.stop()  # the actor is done: its loop thread ends
                return
            if msg is PING:
                self.ping(frames)
                continue
            prepared = self.prepare(msg, frames)
            if prepared is None:
                continue
            prop = self.endpoints.get(msg.method)
            handling = self._handle(msg, prepared, frames)
            prepared = frames = None  # the handler's own to let go of (`_handle`)
            if prop is not None and prop._concurrent:
                self._spawn(handling)
            else:
                await handling
            if self._control:
                await asyncio.sleep(0)  # a supervision is waiting: let it run first

    async def _end_failed(self) -> None:
        await self._tasks_then_cleanup()
        self.ended_failed()
        self._answer_pending()
        self._loop.stop()  # the actor is done: its loop thread ends

    async def _tasks_then_cleanup(self) -> None:
        """Waits for the actor's tasks, then runs `__cleanup__` (its error is printed: the
        actor is ending either way)."""
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        try:
            outcome = self.cleanup()
            if asyncio.iscoroutine(outcome):
                await outcome
        except Exception:  # noqa: BLE001 - a failing cleanup must not block the end
            traceback.print_exc()

    def _answer_pending(self) -> None:
        """Answers pings and refuses calls still queued for an actor that has ended."""
        while self._pending:
            item, arg = self._pending.popleft()
            if item is PING:
                self.ping(arg)
            elif item is not _STOP:
                self.refuse(item)

    async def _stop(self, reason: str, port: tuple | None) -> None:
        """Cancels what runs besides the dispatch (pending supervise, concurrent handlers),
        awaits `__cleanup__`, then refuses whatever is still queued."""
        self._cancel_tasks()  # running handlers end (their finally blocks run) first
        await self._tasks_then_cleanup()
        stopped = when_all(self.stop_descendants(), failures=False)
        try:  # a descendant that does not stop in time is left
            await asyncio.wait_for(stopped.as_asyncio(), _DESCENDANTS_S)
        except TimeoutError:
            pass
        self.stopped(reason, port)
        self._answer_pending()

    async def _handle(self, msg: Call, prepared: tuple[Any, tuple, dict, Context] | None,
                      frames: list[Any] | None) -> None:
        """Runs one message's handler, then answers it. The message's frames and arguments are
        let go of before the answer: once the caller has it, it may send the next big message
        at once, whose buffer then reuses this one's memory instead of faulting in its own
        (64 MiB: ~28 ms of page faults here)."""
        assert prepared is not None and frames is not None
        args: Any
        kwargs: Any
        fn, args, kwargs, ctx = prepared
        begun = self.begin(msg, frames, ctx)
        prepared = frames = None
        try:
            result = fn(self.obj, *args, **kwargs)
            args = kwargs = None
            if asyncio.iscoroutine(result):
                result = await result
        except asyncio.CancelledError as exc:
            args = kwargs = None
            if _cancelling():  # the actor stopped or failed and ended its handlers
                self.finish(msg, begun, dropped=True)
                raise
            self.finish(msg, begun, error=_strip(exc))
        except BaseException as exc:  # noqa: BLE001 - goes to the caller or fails the actor
            args = kwargs = None
            self.finish(msg, begun, error=_strip(exc))
        else:
            self.finish(msg, begun, result)


_DESCENDANTS_S = 30.0
"""How long a stopping actor waits for the meshes it spawned to stop."""




def _cancelling() -> bool:
    """True when the running task is being cancelled (not merely seeing a CancelledError)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _loop_thread(loop: asyncio.AbstractEventLoop) -> int | None:
    return getattr(loop, "_thread_id", None)


class _NullPort:
    """The response port of a broadcast to an explicit-port endpoint: values go nowhere; an
    exception sent to it is raised again (nobody can receive it: it fails the actor, as an
    exception of a broadcast does)."""

    def send(self, obj: Any) -> None:
        pass

    def exception(self, obj: BaseException) -> None:
        raise obj

    def _exception_with_traceback(self, exc: BaseException) -> None:
        raise exc


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


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


def _unpicklable(what: str, msg: Call, exc: BaseException) -> BaseException:
    from .._runtime._errors import UnpicklableError

    return UnpicklableError(f"could not pickle the {what} of {msg.method}: "
                            f"{type(exc).__name__}: {exc}")


def _stopped(mesh: Any) -> bool:
    """Whether a mesh an actor owns is stopped for good (an actor or proc mesh)."""
    stopped = getattr(mesh, "_stopped", None)
    return bool(stopped()) if callable(stopped) else False
