"""PortForwarder: TCP port forwarding between the procs of two meshes, point by point.

    forwarder = this_proc().spawn("forwarder", PortForwarder)
    await forwarder.forward.call_one(dst_procs, 8080, src_procs, "127.0.0.1:18080")
    ...                                     # connect to 127.0.0.1:18080 on each src proc
    await forwarder.stop()                  # closes every forward it started

Each source proc listens at its address; a connection accepted there is carried to the
destination proc at the same point, which connects to `127.0.0.1:dst_port` on its host. The
bytes travel both ways on actor ports (one channel per direction per connection), in order;
half-closes (EOF) are passed on, and a reset on one side aborts the other. The forward's
actors are the forwarder's descendants: stopping it stops them, and their cleanup closes the
listeners and every open connection.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from typing import Any, Callable

from .._actors._actor import Actor
from .._actors._channel import Channel, Port, PortReceiver
from .._runtime._context import current_rank
from .._actors._endpoint import endpoint
from .._runtime._errors import ActorError

CHUNK = 64 * 1024
"""Bytes read from a socket per message."""

CLOSE_S = 1.0
"""How long closing a connection may wait for its peer before it is aborted."""

WINDOW = 1024 * 1024
"""Bytes of one direction of a connection on their way at once (see `_relay`)."""

DATA, ACK, EOF, ABORT = "data", "ack", "eof", "abort"
"""What one direction of a connection carries: bytes, how many bytes of the other direction
were written, the end of the stream, a reset."""


def check_port(what: str, port: Any) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{what} must be an integer from 1 through 65535, got {port!r}")
    return port


def parse_address(address: Any) -> tuple[str, int]:
    """`"host:port"` (IPv6 in brackets) -> (host, port)."""
    if not isinstance(address, str):
        raise ValueError(f"src_address must be an 'address:port' string, got {address!r}")
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError(f"src_address must use 'address:port' form, got {address!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"src_address port must be an integer, got {address!r}") from None
    return host.removeprefix("[").removesuffix("]"), check_port("src_address port", number)


def at_point(value: Any) -> Any:
    """A per-point value: `value(point)` if it is a function, else `value`."""
    return value(current_rank()) if callable(value) else value


class _Links:
    """The open connections of one actor: relay tasks, cancelled together at cleanup."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
              outgoing: Port[Any], incoming: PortReceiver[Any]) -> None:
        task = asyncio.get_running_loop().create_task(
            _relay(reader, writer, outgoing, incoming))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Window:
    """Flow control of one direction: bytes sent and not yet written by the other side."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._room = asyncio.Event()
        self._room.set()

    async def reserve(self, size: int) -> None:
        await self._room.wait()
        self.in_flight += size
        if self.in_flight >= self.limit:
            self._room.clear()

    def release(self, size: int) -> None:
        self.in_flight -= size
        if self.in_flight < self.limit:
            self._room.set()


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 outgoing: Port[Any], incoming: PortReceiver[Any]) -> None:
    """Carries one connection until both directions ended, or one side reset it.

    At most WINDOW bytes of a direction are on their way at once: the side that writes them
    to its socket acknowledges them, so a slow reader slows the writer down (TCP
    back-pressure end to end) instead of filling memory."""
    window = _Window(WINDOW)
    got_eof = asyncio.Event()
    sending = asyncio.ensure_future(_socket_to_port(reader, outgoing, window))
    receiving = asyncio.ensure_future(_port_to_socket(incoming, writer, outgoing, window,
                                                      got_eof))
    ended = asyncio.ensure_future(_both_ended(sending, got_eof))
    try:
        done, _ = await asyncio.wait({receiving, ended}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # a reset (either side) ends both directions
    except (OSError, ActorError, RuntimeError):
        _abort(outgoing, writer)
    except asyncio.CancelledError:
        _abort(outgoing, writer)
        raise
    finally:
        for task in (sending, receiving, ended):
            task.cancel()
        await asyncio.gather(sending, receiving, ended, return_exceptions=True)
        await _close(writer)


async def _both_ended(sending: asyncio.Future[None], got_eof: asyncio.Event) -> None:
    await sending
    await got_eof.wait()


async def _socket_to_port(reader: asyncio.StreamReader, outgoing: Port[Any],
                          window: _Window) -> None:
    while True:
        await window.reserve(CHUNK)
        chunk = await reader.read(CHUNK)
        window.release(CHUNK - len(chunk))
        if not chunk:
            outgoing.send((EOF, b""))
            return
        outgoing.send((DATA, chunk))


async def _port_to_socket(incoming: PortReceiver[Any], writer: asyncio.StreamWriter,
                          outgoing: Port[Any], window: _Window, got_eof: asyncio.Event) -> None:
    while True:
        kind, payload = await incoming.recv()
        if kind == DATA:
            writer.write(payload)
            await writer.drain()
            outgoing.send((ACK, len(payload)))  # written: the other side may send more
        elif kind == ACK:
            window.release(payload)
        elif kind == EOF:
            if writer.can_write_eof():
                writer.write_eof()
                await writer.drain()
            got_eof.set()  # acknowledgements of what this side sends still arrive
        else:
            raise ConnectionAbortedError("the other side of the forward was reset")


def _abort(outgoing: Port[Any], writer: asyncio.StreamWriter) -> None:
    try:
        outgoing.send((ABORT, b""))
    except Exception:  # noqa: BLE001 - the other side may be gone already
        pass
    sock = writer.get_extra_info("socket")
    try:  # a close with linger 0 is an RST; a plain one is a FIN, which reads as an EOF
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except (AttributeError, OSError):  # no socket, or one closed already by its own reset
        pass
    writer.transport.abort()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), CLOSE_S)
    except (OSError, asyncio.TimeoutError):
        writer.transport.abort()


class _Destination(Actor):
    """On a destination proc: connects to the forwarded port for each incoming connection."""

    def __init__(self) -> None:
        self._port: int | None = None
        self._links = _Links()

    @endpoint
    async def target(self, dst_port: Any) -> None:
        self._port = check_port("dst_port", at_point(dst_port))

    @endpoint
    async def connect(self, to_source: Port[Any]) -> Port[Any]:
        if self._port is None:
            raise RuntimeError("this port forward has no destination port yet")
        reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
        to_here: Port[bytes]
        incoming: PortReceiver[bytes]
        to_here, incoming = Channel.open()
        self._links.relay(reader, writer, to_source, incoming)
        return to_here

    async def __cleanup__(self, exc: Exception | None) -> None:
        await self._links.close()


class _Source(Actor):
    """On a source proc: listens, and hands each connection to its destination point."""

    def __init__(self) -> None:
        self._destination: Any = None
        self._server: asyncio.AbstractServer | None = None
        self._links = _Links()

    @endpoint
    async def listen(self, destination: Any, src_address: Any) -> None:
        self._destination = destination.slice(**dict(current_rank()))
        host, port = parse_address(at_point(src_address))
        # several source procs of one host may share an address (the kernel spreads them)
        self._server = await asyncio.start_server(self._accepted, host, port,
                                                  reuse_port=True)

    async def _accepted(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        try:
            to_here: Port[bytes]
            incoming: PortReceiver[bytes]
            to_here, incoming = Channel.open()
            to_destination = await self._destination.connect.call_one(to_here)
        except Exception:  # noqa: BLE001 - the client sees its connection closed
            await _close(writer)
            return
        self._links.relay(reader, writer, to_destination, incoming)

    async def __cleanup__(self, exc: Exception | None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        await self._links.close()


class PortForwarder(Actor):
    """Owns TCP port forwards between proc meshes; stop it to close all of them.

    Spawn it on the local proc (`this_proc().spawn("forwarder", PortForwarder)`) and call
    `forward` once per forward.
    """

    @endpoint
    async def forward(self, dst_proc_mesh: Any, dst_port: int | Callable[[Any], int],
                      src_proc_mesh: Any, src_address: str | Callable[[Any], str]) -> None:
        """Forwards connections to `src_address` ("address:port") on each proc of
        `src_proc_mesh` to `127.0.0.1:dst_port` on the proc of `dst_proc_mesh` at the same
        point; `dst_port` and `src_address` may be functions of that point. Returns once every
        source proc listens.

        Raises (as ActorError to the caller):
            ValueError: the meshes' shapes differ, or a port or address is invalid.
            OSError: a source proc could not listen (the forward's procs are all stopped).
        """
        if dst_proc_mesh.extent != src_proc_mesh.extent:
            raise ValueError("destination and source process meshes must have the same "
                             f"shape: {dst_proc_mesh.extent} != {src_proc_mesh.extent}")
        if not callable(dst_port):
            check_port("dst_port", dst_port)
        if not callable(src_address):
            parse_address(src_address)
        tag = uuid.uuid4().hex[:8]
        started: list[Any] = []
        try:
            destination = dst_proc_mesh.spawn(f"port_forward_dst_{tag}", _Destination)
            started.append(destination)
            source = src_proc_mesh.spawn(f"port_forward_src_{tag}", _Source)
            started.append(source)
            await destination.target.call(dst_port)
            await source.listen.call(destination, src_address)
        except Exception as exc:
            problems = []
            for mesh in reversed(started):  # nothing half-made keeps listening
                try:
                    await mesh.stop()
                except Exception as stop_error:  # noqa: BLE001 - noted on the error
                    problems.append(f"{type(stop_error).__name__}: {stop_error}")
            if problems:
                exc.add_note("stopping the forward's actors failed: " + "; ".join(problems))
            raise
