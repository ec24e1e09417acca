"""PortForwarder: TCP forwarded point to point between proc meshes, with back-pressure,
half-close and reset carried end to end, and nothing left listening once it stops."""

from __future__ import annotations

import asyncio
import hashlib
import socket

import pytest

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


def test_a_slow_reader_slows_the_writer_and_loses_nothing(fault_log):
    async def body() -> None:
        digest: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()

        async def slow_sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            total, h = 0, hashlib.sha256()
            while data := await reader.read(16384):
                total += len(data)
                h.update(data)
                await asyncio.sleep(0.001)  # sleep-ok: the slow reader under test
            digest.set_result((total, h.hexdigest()))
            writer.close()

        procs = this_host().spawn_procs(per_host={"procs": 2})
        server = await asyncio.start_server(slow_sink, HOST, 0)
        (listen,) = free_ports(1)
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        await forwarder.forward.call_one(procs.slice(procs=0), server.sockets[0].getsockname()[1],
                                         procs.slice(procs=1), f"{HOST}:{listen}")
        payload = hashlib.sha256(b"seed").digest() * (8 * 1024 * 1024 // 32)
        _, writer = await asyncio.open_connection(HOST, listen)
        writer.write(payload)
        writer.write_eof()
        await writer.drain()
        assert await asyncio.wait_for(digest, 60) == (len(payload),
                                                      hashlib.sha256(payload).hexdigest())
        writer.close()
        await forwarder.stop()
        server.close()
        await procs.stop()

    run(body())


def test_a_reset_is_carried_to_the_other_side(fault_log):
    async def body() -> None:
        connected, gone = asyncio.Event(), asyncio.Event()

        async def firehose(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connected.set()
            try:
                while True:
                    writer.write(b"x" * 65536)
                    await writer.drain()
            except OSError:
                gone.set()

        procs = this_host().spawn_procs(per_host={"procs": 2})
        server = await asyncio.start_server(firehose, HOST, 0)
        (listen,) = free_ports(1)
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        await forwarder.forward.call_one(procs.slice(procs=0), server.sockets[0].getsockname()[1],
                                         procs.slice(procs=1), f"{HOST}:{listen}")
        _, writer = await asyncio.open_connection(HOST, listen)
        await asyncio.wait_for(connected.wait(), 30)
        writer.transport.abort()  # RST from the client
        await asyncio.wait_for(gone.wait(), 30)
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
