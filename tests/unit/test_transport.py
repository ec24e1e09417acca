"""The zmq transport alone: auth (PLAIN and CURVE), back-pressure, dead peers never hang."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
import zmq
from waiting import wait_until

from monarch._wire import _transport
from monarch._wire._messages import Notice
from monarch._wire._transport import Inbox, Outbox, PeerGone

pytestmark = pytest.mark.timeout(60)


def pump_until(inbox: Inbox, enough: Callable[[list], Any], what: str,
               outbox: Outbox | None = None, timeout: float = 20.0) -> list:
    """Reads the inbox (flushing `outbox` meanwhile) until `enough(got)` holds; returns the
    messages that came."""
    sock, zap, monitor = inbox.poll_sockets()
    poller = zmq.Poller()
    for s in (sock, zap, monitor):
        poller.register(s, zmq.POLLIN)
    got: list = []

    def done() -> Any:
        if outbox is not None:
            outbox.flush()
        for s, _ in poller.poll(20):
            if s is zap:
                inbox.service_zap()
            elif s is monitor:
                inbox.service_monitor()
            else:
                while (item := inbox.recv_nowait()) is not None:
                    got.append(item[0])
        return enough(got)

    wait_until(done, lambda: f"{what} (came: {[m.topic for m in got][:20]})", timeout,
               interval=0)
    return got


@pytest.fixture(autouse=True)
def zmq_links_only(monkeypatch):
    """These tests are of the zmq links; lanes have their own (tests/test_lane.py)."""
    monkeypatch.setenv("MONARCH_LANES", "0")


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_curve_off_loopback(ctx, monkeypatch):
    """Non-loopback tcp uses CURVE; forced here on 127.0.0.1 (tests stay on loopback)."""
    monkeypatch.setattr(_transport, "is_private", lambda endpoint: endpoint.startswith("ipc"))
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, "tcp://127.0.0.1:0")
    good, bad = Outbox(ctx, secret), Outbox(ctx, os.urandom(32))
    try:
        good.send(inbox.address, Notice("hello", 1))
        bad.send(inbox.address, Notice("evil", 2), block=False)
        stats = inbox.stats
        got = pump_until(inbox, lambda got: got and stats.denied_peers + stats.failed_handshakes,
                         "the good message in and the bad peer refused")
        assert [m.topic for m in got] == ["hello"]
    finally:
        good.close(0)
        bad.close(0)
        inbox.close()


def test_back_pressure_then_dead_peer_raises_instead_of_hanging(ctx, monkeypatch, tmp_path):
    monkeypatch.setattr(_transport, "HWM", 10)
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/bp.sock")
    dead: set[str] = set()
    blocked = threading.Event()

    def is_dead(address: str) -> bool:  # asked only by a send waiting at the high-water mark
        blocked.set()
        return address in dead

    outbox = Outbox(ctx, secret, is_dead)
    sent = 0
    result: list = []

    def flood() -> None:
        nonlocal sent
        try:
            for i in range(100_000):
                outbox.send(inbox.address, Notice("x", i))
                sent += 1
        except PeerGone as exc:
            result.append(exc)

    thread = threading.Thread(target=flood)
    thread.start()
    assert blocked.wait(timeout=30)  # the sender waits at the high-water mark...
    assert thread.is_alive() and sent < 1000  # ...instead of dropping
    pump_until(inbox, len, "a message of the flood")
    dead.add(inbox.address)  # the peer dies while the sender waits
    thread.join(timeout=10)
    assert not thread.is_alive() and isinstance(result[0], PeerGone)
    outbox.close(0)
    inbox.close()


def test_io_loop_sends_never_block_they_queue(ctx, monkeypatch, tmp_path):
    monkeypatch.setattr(_transport, "HWM", 5)
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/backlog.sock")
    outbox = Outbox(ctx, secret)
    for i in range(200):
        outbox.send(inbox.address, Notice("y", i), block=False)
    assert outbox.backlogged == {inbox.address}
    got = pump_until(inbox, lambda got: len(got) >= 200, "the 200 queued messages", outbox)
    assert [m.body for m in got] == list(range(200)) and not outbox.backlogged
    outbox.close(0)
    inbox.close()


def test_a_fixed_port_held_for_a_moment_is_bound_once_free(ctx, monkeypatch):
    """A port picked by probing may be held briefly by someone else: the inbox tries again."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    attempts = []
    real_bind = zmq.Socket.bind

    def bind(sock, endpoint):
        if not endpoint.startswith("tcp://"):
            return real_bind(sock, endpoint)
        attempts.append(endpoint)
        try:
            return real_bind(sock, endpoint)
        finally:
            holder.close()  # held during the first try only

    monkeypatch.setattr(zmq.Socket, "bind", bind)
    inbox = Inbox(ctx, os.urandom(32), f"tcp://127.0.0.1:{port}")
    try:
        assert inbox.address == f"tcp://127.0.0.1:{port}"
        assert attempts == [f"tcp://127.0.0.1:{port}"] * 2  # refused once, then bound
    finally:
        inbox.close()


def test_a_port_held_for_good_is_refused(ctx, monkeypatch):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    monkeypatch.setattr(_transport, "BIND_RETRY_S", 0.2)
    try:
        with pytest.raises(zmq.ZMQError) as caught:
            Inbox(ctx, os.urandom(32), f"tcp://127.0.0.1:{holder.getsockname()[1]}")
        assert caught.value.errno == zmq.EADDRINUSE
    finally:
        holder.close()


def test_a_send_on_a_link_forgotten_meanwhile_is_peer_gone(ctx, tmp_path):
    """A sender takes its link, then the loop forgets it (the peer died) and closes its socket
    before the sender locks it: PeerGone, as for any dead peer, not zmq's "Socket operation
    on non-socket" (seen under load in test_kill_random_ranks_under_steady_load)."""
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/forgotten.sock")
    outbox = Outbox(ctx, secret)
    try:
        outbox.send(inbox.address, Notice("before", 0))
        stale = outbox._links[inbox.address]
        outbox.forget(inbox.address)
        outbox._links[inbox.address] = stale  # as taken by the sender just before `forget`
        with pytest.raises(PeerGone):
            outbox.send(inbox.address, Notice("after", 1))
        with pytest.raises(PeerGone):
            outbox.send(inbox.address, Notice("after", 2), block=False)
    finally:
        outbox.close(0)
        inbox.close()
