"""PortForwarder: TCP forwarded point to point between proc meshes, with back-pressure,
half-close and reset carried end to end, and nothing left listening once it stops."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
import time

import pytest
from waiting import wait_until_async

from monarch.actor import ActorError, this_host, this_proc
from monarch.job import PortForwarder

pytestmark = pytest.mark.timeout(120)

HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for sock in socks:
        sock.bind((HOST, 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


def bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


def run(coro):  # each test drives its own loop: the forwarder's calls are awaited
    return asyncio.run(coro)


def test_round_trip_half_close_and_stop(fault_log):
    async def body() -> None:
        procs = this_host().spawn_procs(per_host={"procs": 2})
        server = await asyncio.start_server(echo, HOST, 0)
        (listen,) = free_ports(1)
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        await forwarder.forward.call_one(procs.slice(procs=0), server.sockets[0].getsockname()[1],
                                         procs.slice(procs=1), f"{HOST}:{listen}")
        payload = bytes(range(256)) * 8192  # 2 MiB: more than one window
        reader, writer = await asyncio.open_connection(HOST, listen)
        writer.write(payload)
        writer.write_eof()  # half-closed: the echo still answers, then closes
        assert await reader.readexactly(len(payload)) == payload
        assert await reader.read() == b""
        writer.close()
        await forwarder.stop()
        with pytest.raises(OSError):
            await asyncio.open_connection(HOST, listen)
        server.close()
        await procs.stop()

    run(body())


def reset(writer: asyncio.StreamWriter) -> None:
    """Ends a connection with an RST (a close with SO_LINGER 0), not a FIN."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
    writer.transport.abort()


STALLED_S = 1.0
"""A writer whose sends made no progress for this long is taken as held back."""


def small_buffer_listener(size: int) -> socket.socket:
    """A listening socket whose connections take at most about `size` bytes unread."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    sock.bind((HOST, 0))
    sock.listen()
    return sock


class Writer:
    """Writes `payload` to a connection chunk by chunk, each send waiting until the kernel took
    it; `sent` is what the kernel took so far, `moved` when it last took some."""

    def __init__(self, writer: asyncio.StreamWriter, payload: bytes) -> None:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        writer.transport.set_write_buffer_limits(high=0)  # drain() waits for the kernel
        self.sent, self.moved = 0, time.monotonic()
        self.task = asyncio.ensure_future(self._write(writer, payload))

    async def _write(self, writer: asyncio.StreamWriter, payload: bytes) -> None:
        for at in range(0, len(payload), 65536):
            writer.write(payload[at:at + 65536])
            await writer.drain()
            self.sent, self.moved = at + len(payload[at:at + 65536]), time.monotonic()
        writer.write_eof()

    def stalled(self) -> bool:
        return self.task.done() or time.monotonic() - self.moved > STALLED_S


def test_a_slow_reader_slows_the_writer_and_loses_nothing(fault_log):
    async def body() -> None:
        reading = asyncio.Event()
        digest: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()

        async def held_sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reading.wait()  # reads nothing until the test says so
            total, h = 0, hashlib.sha256()
            while data := await reader.read(65536):
                total += len(data)
                h.update(data)
            digest.set_result((total, h.hexdigest()))
            writer.close()

        procs = this_host().spawn_procs(per_host={"procs": 2})
        server = await asyncio.start_server(held_sink, sock=small_buffer_listener(65536))
        (listen,) = free_ports(1)
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        await forwarder.forward.call_one(procs.slice(procs=0), server.sockets[0].getsockname()[1],
                                         procs.slice(procs=1), f"{HOST}:{listen}")
        payload = hashlib.sha256(b"seed").digest() * (96 * 1024 * 1024 // 32)
        _, client = await asyncio.open_connection(HOST, listen)
        writer = Writer(client, payload)
        await wait_until_async(writer.stalled, "the writer to finish or be held back", 120)
        # held back while nobody reads: what is on its way is the forwarder's window and the
        # sockets' buffers, never the whole payload (a forwarder that buffers took it all)
        assert not writer.task.done() and writer.sent <= len(payload) // 2, writer.sent
        reading.set()
        assert await asyncio.wait_for(digest, 120) == (len(payload),
                                                       hashlib.sha256(payload).hexdigest())
        await writer.task
        client.close()
        await forwarder.stop()
        server.close()
        await procs.stop()

    run(body())


def test_a_reset_is_carried_as_a_reset_and_a_close_as_a_close(fault_log):
    async def body() -> None:
        ends: asyncio.Queue[str] = asyncio.Queue()

        async def watch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            """Says how the client ended the connection (an orderly close reads as EOF, a
            reset raises); resets it when asked to."""
            writer.write(b"hello")
            try:
                while data := await reader.read(65536):
                    if data == b"reset me":
                        reset(writer)
                        return
                await ends.put("eof")
            except ConnectionResetError:
                await ends.put("reset")
            writer.close()

        procs = this_host().spawn_procs(per_host={"procs": 2})
        server = await asyncio.start_server(watch, HOST, 0)
        (listen,) = free_ports(1)
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        await forwarder.forward.call_one(procs.slice(procs=0), server.sockets[0].getsockname()[1],
                                         procs.slice(procs=1), f"{HOST}:{listen}")

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection(HOST, listen)
            assert await asyncio.wait_for(reader.readexactly(5), 30) == b"hello"
            return reader, writer

        _, writer = await connect()
        writer.close()  # a FIN from the client: the server reads an EOF
        assert await asyncio.wait_for(ends.get(), 30) == "eof"
        _, writer = await connect()
        reset(writer)  # an RST from the client: the server's read fails
        assert await asyncio.wait_for(ends.get(), 30) == "reset"
        reader, writer = await connect()
        writer.write(b"reset me")  # an RST from the server: the client's read fails
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(), 30)
        writer.close()
        await forwarder.stop()
        server.close()
        await procs.stop()

    run(body())


def test_bad_forwards_are_refused_and_leave_nothing_listening(fault_log):
    async def body() -> None:
        procs = this_host().spawn_procs(per_host={"procs": 2})
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        with pytest.raises(ActorError, match="must have the same shape"):
            await forwarder.forward.call_one(procs, 1234, procs.slice(procs=0), f"{HOST}:5678")
        with pytest.raises(ActorError, match="dst_port must be an integer from 1 through"):
            await forwarder.forward.call_one(procs, 0, procs, f"{HOST}:5678")
        with pytest.raises(ActorError, match="'address:port' form"):
            await forwarder.forward.call_one(procs, 1234, procs, "5678")
        dst, *listen = free_ports(3)
        blocker = socket.socket()
        blocker.bind((HOST, listen[1]))
        blocker.listen()
        with pytest.raises(ActorError, match="[Aa]ddress already in use"):
            await forwarder.forward.call_one(procs, dst, procs,
                                             lambda point: f"{HOST}:{listen[point['procs']]}")
        blocker.close()
        assert all(bindable(port) for port in listen)  # the half-made forward was stopped
        await forwarder.stop()
        await procs.stop()

    run(body())
