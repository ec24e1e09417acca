"""Hostile input on every socket: unknown peers, wrong secrets, garbage bytes and frames.

Nothing from an unauthenticated peer reaches our code; garbage from an authenticated peer is
dropped and counted; no process crashes, and the job keeps working afterwards.
"""

from __future__ import annotations

import os
import socket

import msgpack
import pytest
from waiting import wait_until
import zmq

from monarch._runtime._identity import current_process
from monarch._wire._messages import VERSION, Call, encode
from monarch.actor import Actor, Channel, endpoint

pytestmark = pytest.mark.timeout(60)


class Adder(Actor):
    @endpoint
    def add(self, a: int, b: int) -> int:
        return a + b


def push(ctx: zmq.Context, address: str, password: bytes | None) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.linger = 0
    if password is not None:
        sock.plain_username = b"monarch"
        sock.plain_password = password
    sock.connect(address)
    return sock


def stats_of(procs, rank=0):
    return procs.stats().get(timeout=20).get(rank)


def test_garbage_and_unknown_peers_on_a_proc_inbox(procs):
    adders = procs.spawn("garbage_target", Adder)
    assert adders.add.call(1, 2).get().get(0) == 3
    address = procs._table[procs._ranks[0]]
    secret = current_process().secret
    ctx = zmq.Context()
    try:
        before = stats_of(procs)
        anonymous = push(ctx, address, None)
        anonymous.send(b"hello?")
        impostor = push(ctx, address, os.urandom(32))
        impostor.send(msgpack.packb([VERSION, 6, "x", b"y"]))
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(address.removeprefix("ipc://"))
        raw.sendall(os.urandom(512))
        raw.close()
        insider = push(ctx, address, secret)
        for frame in [b"", b"\xc1garbage", msgpack.packb([VERSION + 7, 1]),
                      msgpack.packb([VERSION, 424242]), msgpack.packb([VERSION, 2, "x"])]:
            insider.send(frame)
        # An envelope that promises 3 frames but carries 1, and one that carries too many.
        view = procs._view.to_wire()
        short = Call("evil", adders._mesh_id, "add", procs._procs, view, 0, 1, ((0, 1),),
                     None, None, 0, 3)
        insider.send_multipart([encode(short), b"only one"])
        port, receiver = Channel.open()
        bad_payload = Call("evil", adders._mesh_id, "add", procs._procs, view, 0, 1, ((0, 1),),
                           (port._address, port._port_id), None, 0, 1)
        insider.send_multipart([encode(bad_payload), b"not a pickle"])
        with pytest.raises(Exception, match="could not|unpickl|pickle"):
            receiver.recv().get(timeout=10)

        def settled():
            now = stats_of(procs)
            done = (now["bad_frames"] >= before["bad_frames"] + 6
                    and now["denied_peers"] > before["denied_peers"])
            return now if done else None

        after = wait_until(settled)
        assert after["failed_handshakes"] > before["failed_handshakes"]
        assert after["internal_errors"] == before["internal_errors"]
        # The proc and its actor are fine.
        assert adders.add.call(2, 3).get().get(0) == 5
    finally:
        ctx.destroy(linger=0)


def test_a_call_whose_view_does_not_hash_runs_and_leaves_the_actor_alive(procs):
    """An actor's thread keeps a message's context per (view, index); a view holding a map
    (msgpack decodes it as a dict, which does not hash) gets a context of its own, and the
    actor answers it and lives on."""
    adders = procs.spawn("garbage_views", Adder)
    assert adders.add.call(1, 2).get().get(0) == 3
    address = procs._table[procs._ranks[0]]
    ctx = zmq.Context()
    try:
        insider = push(ctx, address, current_process().secret)
        view = (*procs._view.to_wire()[:-1], {"not": "hashable"})
        port, receiver = Channel.open()
        odd = Call("odd", adders._mesh_id, "add", procs._procs, view, 0, 1, ((0, 1),),
                   (port._address, port._port_id), None, 0, 1)
        from monarch._wire import _serial

        insider.send_multipart([encode(odd), _serial.dumps(((20, 22), {}))[0]])
        assert receiver.recv().get(timeout=20) == 42
        assert adders.add.call(2, 3).get().get(0) == 5
    finally:
        ctx.destroy(linger=0)


def test_garbage_on_the_controller_inbox(procs):
    from monarch._runtime import _process_runtime as _process

    runtime = _process.current()
    ctx = zmq.Context()
    try:
        before = runtime.inbox.stats.bad_frames, runtime.inbox.stats.denied_peers
        impostor = push(ctx, runtime.address, os.urandom(32))
        impostor.send(b"x")
        insider = push(ctx, runtime.address, current_process().secret)
        insider.send(b"\x00\x01garbage")
        wait_until(lambda: runtime.inbox.stats.bad_frames > before[0]
                 and runtime.inbox.stats.denied_peers > before[1])
        assert procs.spawn("still_works", Adder).add.call(1, 1).get().get(0) == 2
    finally:
        ctx.destroy(linger=0)
