"""Port sinks: where replies land, and how they become the values of futures.

A sink is registered under a port id in the process runtime. The I/O loop hands it each Reply;
the sink settles futures with *lazy* values, so unpickling happens in the consumer's thread.
When a proc dies, sinks still waiting on it fail at once with a SupervisionError.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Sequence

from ._errors import ActorError, SupervisionError, UnpicklableError, actor_failure_report
from ._future import Future
from .._wire import _serial
from .._wire._messages import ERROR, FAILED, OK, Reply


class CallInfo:
    """What a caller needs to word errors: the mesh's name, the method, and a function that
    names the actor answering index i (`<root>.<__main__.A a{'gpus': 0/2}>`)."""

    __slots__ = ("mesh_name", "method", "label")

    def __init__(self, mesh_name: str, method: str, label: Callable[[int], str]) -> None:
        self.mesh_name = mesh_name
        self.method = method
        self.label = label

    def report(self, index: int, reason: str) -> str:
        """The failure report of the actor answering `index`."""
        return actor_failure_report(self.label(index), reason)


def decode_value(reply: Reply, frames: Sequence[Any], info: CallInfo | None) -> Any:
    """Returns the reply's value, or raises the ActorError/SupervisionError it carries."""
    if reply.status == OK:
        if not frames:
            return None
        return _load(frames, "result", info)
    if reply.status == ERROR:
        exception, remote_tb = _load(frames, "exception", info)
        where = f"{info.mesh_name}.{info.method}" if info else "port"
        err = ActorError(exception, f"Actor call {where} failed.")
        err.remote_traceback = remote_tb
        raise err
    if reply.status == FAILED:
        raise supervision_error(info, _load(frames, "failure", info))
    raise UnpicklableError(f"reply with unknown status {reply.status}")


def supervision_error(info: CallInfo | None, report: str, failure: Any = None) -> SupervisionError:
    """The error a caller sees for a failed or stopped actor."""
    where = f"{info.mesh_name}.{info.method}()" if info else "port"
    return SupervisionError(f"Endpoint call {where} failed, {report}", endpoint=where,
                            failure=failure)


def _load(frames: Sequence[Any], what: str, info: CallInfo | None) -> Any:
    try:
        return _serial.loads(frames[0].buffer, [f.buffer for f in frames[1:]])
    except Exception as exc:
        where = f" of {info.mesh_name}.{info.method}" if info else ""
        raise UnpicklableError(
            f"could not unpickle the {what}{where}: {type(exc).__name__}: {exc}") from exc


class Sink:
    """Base of port sinks. `addresses[i]` is the process answering index i."""

    __slots__ = ("addresses", "info")

    missing = 0
    """Replies it still expects that a leader may let pile up (`_gather`): a `CallSink`'s."""

    def __init__(self, addresses: Sequence[str], info: CallInfo | None) -> None:
        self.addresses = addresses
        self.info = info

    def deliver(self, reply: Reply, frames: list[Any]) -> bool:
        """Takes one reply; returns True when the sink is complete (to be unregistered)."""
        raise NotImplementedError

    def fail(self, address: str, reason: str, failure: Any) -> bool:
        """The process at `address` died (`reason`); returns True when the sink is complete."""
        raise NotImplementedError

    def _error(self, index: int, reason: str, failure: Any) -> SupervisionError:
        info = self.info
        assert info is not None
        return supervision_error(info, info.report(index, reason), failure)


class OneSink(Sink):
    """One answer settles one future (call_one, choose)."""

    __slots__ = ("future",)

    def __init__(self, future: Future[Any], address: str, info: CallInfo) -> None:
        super().__init__((address,), info)
        self.future = future

    def deliver(self, reply: Reply, frames: list[Any]) -> bool:
        info = self.info
        self.future.set_lazy(lambda: decode_value(reply, frames, info), reply.status != OK)
        return True

    def fail(self, address: str, reason: str, failure: Any) -> bool:
        self.future.set_exception(self._error(0, reason, failure))
        return True


class CallSink(Sink):
    """N answers build a ValueMesh; the first error fails the whole call."""

    __slots__ = ("future", "build", "_replies", "missing")

    def __init__(self, future: Future[Any], addresses: Sequence[str], info: CallInfo,
                 build: Callable[[list[Any]], Any]) -> None:
        super().__init__(addresses, info)
        self.future = future
        self.build = build
        self._replies: list[Any] = [None] * len(addresses)
        self.missing = len(addresses)
        """Replies not yet received (read by the waiting leader: `_gather`)."""
        future._gather = self

    def deliver(self, reply: Reply, frames: list[Any]) -> bool:
        if reply.status != OK:
            info = self.info
            self.future.set_lazy(lambda: decode_value(reply, frames, info), True)
            return True
        if self._replies[reply.index] is None:
            self.missing -= 1
        self._replies[reply.index] = (reply, frames)
        if self.missing:
            return False
        replies, info, build = self._replies, self.info, self.build
        self.future.set_lazy(lambda: build([decode_value(r, f, info) for r, f in replies]))
        return True

    def fail(self, address: str, reason: str, failure: Any) -> bool:
        for i, addr in enumerate(self.addresses):
            if addr == address and self._replies[i] is None:
                self.future.set_exception(self._error(i, reason, failure))
                return True
        return False


class StreamSink(Sink):
    """N answers settle N futures in arrival order (stream)."""

    __slots__ = ("futures", "_next", "_answered")

    def __init__(self, futures: list[Future[Any]], addresses: Sequence[str],
                 info: CallInfo) -> None:
        super().__init__(addresses, info)
        self.futures = futures
        self._next = 0
        self._answered = [False] * len(addresses)

    def deliver(self, reply: Reply, frames: list[Any]) -> bool:
        if 0 <= reply.index < len(self._answered):
            self._answered[reply.index] = True
        info = self.info
        self.futures[self._next].set_lazy(lambda: decode_value(reply, frames, info),
                                          reply.status != OK)
        self._next += 1
        return self._next == len(self.futures)

    def fail(self, address: str, reason: str, failure: Any) -> bool:
        for i, addr in enumerate(self.addresses):
            if addr == address and not self._answered[i]:
                self._answered[i] = True
                self.futures[self._next].set_exception(self._error(i, reason, failure))
                self._next += 1
        return self._next == len(self.futures)


class QueueSink(Sink):
    """Values sent to a Port, received in order by a PortReceiver; lives until closed, or,
    `once`, until its first value (later ones are dropped: a one-shot port)."""

    __slots__ = ("_lock", "_values", "_waiters", "ranked", "once")

    def __init__(self, ranked: bool = False, once: bool = False) -> None:
        super().__init__((), None)
        self._lock = threading.Lock()
        self._values: collections.deque[tuple[Reply, list[Any]]] = collections.deque()
        self._waiters: collections.deque[Future[Any]] = collections.deque()
        self.ranked = ranked
        self.once = once

    def deliver(self, reply: Reply, frames: list[Any]) -> bool:
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
            else:
                self._values.append((reply, frames))
                return self.once
        self._settle(waiter, reply, frames)
        return self.once

    def next(self) -> Future[Any]:
        """A future of the next value sent to the port."""
        fut: Future[Any] = Future._pending()
        with self._lock:
            if not self._values:
                self._waiters.append(fut)
                return fut
            reply, frames = self._values.popleft()
        self._settle(fut, reply, frames)
        return fut

    def _settle(self, fut: Future[Any], reply: Reply, frames: list[Any]) -> None:
        if self.ranked:
            fut.set_lazy(lambda: (reply.index, decode_value(reply, frames, None)))
        else:
            fut.set_lazy(lambda: decode_value(reply, frames, None))

    def fail(self, address: str, reason: str, failure: Any) -> bool:
        return False
