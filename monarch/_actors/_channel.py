"""Channels: a Port any process can send values to, and the PortReceiver that reads them."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from .._runtime import _process_runtime as _process
from .._runtime._errors import remote_traceback
from .._runtime._future import Future
from .._runtime._ports import QueueSink
from .._wire import _serial
from .._wire._messages import ERROR, OK

R = TypeVar("R")


class Port(Generic[R]):
    """The sending end of a channel; picklable, so it can be passed to actors.

    `send(value)` delivers a value to the receiver; `exception(exc)` delivers an error that the
    receiver's `recv()` raises.
    """

    def __init__(self, address: str, port_id: int, rank: int | None = None) -> None:
        self._address = address
        self._port_id = port_id
        self._rank = rank

    def send(self, obj: R) -> None:
        """Sends `obj` to the receiving end."""
        self._post(OK, obj)

    def exception(self, obj: BaseException) -> None:
        """Sends an exception; the receiver's `recv()` raises it (as an ActorError)."""
        self._post(ERROR, (obj, ""))

    def _exception_with_traceback(self, exc: BaseException) -> None:
        """Sends an exception raised here, with its traceback (the caller's remote one)."""
        data, buffers = _serial.dumps_exception(exc, remote_traceback(exc))
        self._reply(ERROR, [data, *buffers])

    def _post(self, status: int, obj: Any) -> None:
        frames: list[Any] = []
        if not (status == OK and obj is None):
            data, buffers = _serial.dumps(obj)
            frames = [data, *buffers]
        self._reply(status, frames)

    def _reply(self, status: int, frames: list[Any]) -> None:
        runtime = _process.current()
        if runtime is None:
            raise RuntimeError("Port.send needs a running monarch process")
        index = -1 if self._rank is None else self._rank
        runtime.reply((self._address, self._port_id), index, status, frames)

    def __reduce__(self) -> Any:
        return Port, (self._address, self._port_id, self._rank)

    def __repr__(self) -> str:
        return f"Port({self._address}, {self._port_id})"


class PortReceiver(Generic[R]):
    """The receiving end of a channel: `recv()` is a future of the next value, in send order."""

    def __init__(self, sink: QueueSink, port_id: int) -> None:
        self._sink = sink
        self._port_id = port_id

    def recv(self) -> Future[R]:
        """A future of the next value sent to the port. It claims a value when it is first
        observed (`get`, `await`), not when made: futures observed in reverse order receive
        in observation order, and one dropped unobserved claims nothing."""
        return Future.deferred(self._sink.next)

    def ranked(self) -> "PortReceiver[tuple[int, R]]":
        """A receiver that yields `(rank, value)` pairs."""
        self._sink.ranked = True
        return self  # type: ignore[return-value]

    def close(self) -> None:
        """Stops receiving; values sent afterwards are dropped."""
        runtime = _process.current()
        if runtime is not None:
            runtime.drop_port(self._port_id)


class Channel(Generic[R]):
    """Opens (Port, PortReceiver) pairs."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[R], PortReceiver[R]]:
        """A new channel in this process: the Port to hand out and the receiver to keep.
        `once`: a one-shot port, closed after its first value (later sends are dropped)."""
        return _open(ranked=False, once=_flag(once))

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port[R], PortReceiver[tuple[int, R]]]:
        """Like `open`, with a receiver that yields `(rank, value)` pairs."""
        return _open(ranked=True, once=_flag(once))  # type: ignore[return-value]


def _flag(once: Any) -> bool:
    if not isinstance(once, bool):
        raise TypeError(f"Channel.open: once must be a bool, got {once!r}")
    return once


def _open(ranked: bool, once: bool = False) -> tuple[Port[Any], PortReceiver[Any]]:
    from .._runtime._context import root

    root()  # joins (or starts) the job
    runtime = _process.current()
    assert runtime is not None
    sink = QueueSink(ranked, once)
    port_id = runtime.new_port(sink)
    return Port(runtime.address, port_id), PortReceiver(sink, port_id)
