"""Lanes (`monarch._wire._lane`): same-host links that bypass zmq, read by the loop itself.

In process (an Inbox and an Outbox of this test): order, big frames, a peer that is not
listening yet, a peer without lanes, a wrong secret, garbage on the stream, back-pressure and a
dead peer, closing with messages still queued.

In a real job (on by default, off with `MONARCH_LANES=0`): the controller and its procs talk over
lanes, in order, big messages whole, and a process that receives garbage on its lane keeps
serving. That job runs in a script of its own: the pytest process's runtime was made with lanes
as the environment had them when it started."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import pytest
import zmq
from waiting import Description, wait_until

from monarch._wire import _lane, _transport
from monarch._wire._messages import Call, Notice, encode
from monarch._wire._transport import Inbox, Outbox, PeerGone

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def lanes(monkeypatch):
    monkeypatch.setenv("MONARCH_LANES", "1")


def pump_until(inbox: Inbox, count: int, outbox: Outbox | None = None,
               timeout: float = 20.0) -> list:
    """Reads the inbox (zmq and lanes, as the runtime's loop does) until `count` messages came
    (one poll at least); flushes `outbox` meanwhile. Returns [(msg, frames)]."""
    got: list = []
    pump_while(inbox, got, lambda: len(got) < count,
               lambda: f"{count} messages ({len(got)} came)", outbox, timeout)
    return got


def pump_while(inbox: Inbox, got: list, going: Callable[[], bool], what: Description,
               outbox: Outbox | None = None, timeout: float = 20.0) -> None:
    """Reads the inbox into `got` (one poll at least) until `going()` is false."""
    def done() -> bool:
        pump_once(inbox, got, outbox)
        return not going()

    wait_until(done, what, timeout, interval=0)  # each poll waits up to 10 ms


def pump_once(inbox: Inbox, got: list, outbox: Outbox | None) -> None:
    if outbox is not None:
        outbox.flush()
    poller = zmq.Poller()
    sock, zap, monitor = inbox.poll_sockets()
    for s in (sock, zap, monitor):
        poller.register(s, zmq.POLLIN)
    lane = inbox.lane
    if lane is not None:
        poller.register(lane.sock.fileno(), zmq.POLLIN)
        for fd in lane.conns:
            poller.register(fd, zmq.POLLIN)
    for target, _ in poller.poll(10):
        if target is zap:
            inbox.service_zap()
        elif target is monitor:
            inbox.service_monitor()
        elif target is sock:
            while (item := inbox.recv_nowait()) is not None:
                got.append(item)
        elif lane is not None and target == lane.sock.fileno():
            lane.accept()
        elif lane is not None and target in lane.conns:
            read_lane(inbox, lane, lane.conns[target], got)


def read_lane(inbox: Inbox, lane: Any, conn: Any, got: list) -> None:
    out: list = []
    alive = conn.read(out)
    for parts in out:
        item = inbox.lane_message(parts)
        if item is not None:
            got.append(item)
    if not alive:
        if conn.denied:
            inbox.stats.denied_peers += 1
        elif conn.broken:
            inbox.stats.bad_frames += 1
        lane.drop(conn)


def kinds(outbox: Outbox, address: str) -> str:
    link = outbox._links[address]
    return "lane" if link.lane is not None else "pending" if link.pending else "zmq"


@pytest.mark.parametrize("wrap", [memoryview, bytes])  # bytes: one sendmsg, the rest queued
def test_messages_go_by_the_lane_in_order_big_frames_whole(ctx, lanes, tmp_path, wrap):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/a.sock")
    outbox = Outbox(ctx, secret)
    try:
        assert inbox.lane is not None and os.path.exists(f"{tmp_path}/a.lane")
        # bigger than _lane.BIG (read straight into its own buffer) and than the socket's
        # buffer (what one write leaves is queued, then written as the reader takes it)
        big = os.urandom(24 << 20)
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(pump_until(inbox, 502)))
        reader.start()  # a blocking send of a big message waits until it has been read
        for i in range(500):
            outbox.send(inbox.address, Notice("n", i))
        outbox.send(inbox.address, Call("s", "m", "f", "p", (), 0, 1, ((1, 1),), None, None,
                                        0, 2), [b"small", wrap(big)])
        outbox.send(inbox.address, Notice("after", 1))
        assert kinds(outbox, inbox.address) == "lane"
        reader.join(timeout=30)
        assert [m.body for m, _ in got[:500]] == list(range(500))
        call, frames = got[500]
        assert call.method == "f" and [f.bytes for f in frames] == [b"small", big]
        assert got[501][0].topic == "after"
        assert inbox.stats.received == 502 and inbox.stats.bad_frames == 0
    finally:
        outbox.close(0)
        inbox.close()
    assert not os.path.exists(f"{tmp_path}/a.lane")


@pytest.mark.parametrize("size", [3 << 20, 200_000])  # read into its own buffer / whole
def test_a_bytes_payload_a_lane_brings_is_the_bytes_it_read_into(ctx, lanes, tmp_path, size):
    from monarch._wire import _serial

    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/a.sock")
    outbox = Outbox(ctx, secret)
    try:
        payload = os.urandom(size)
        data, buffers = _serial.dumps(payload)
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(pump_until(inbox, 1)))
        reader.start()  # a blocking send of a big message waits until it has been read
        outbox.send(inbox.address, Call("s", "m", "f", "p", (), 0, 1, ((1, 1),), None, None,
                                        0, 2), [data, *buffers])
        reader.join(timeout=30)
        assert kinds(outbox, inbox.address) == "lane"
        frames = got[0][1]
        value = _serial.loads(frames[0].buffer, [f.buffer for f in frames[1:]])
        assert value == payload and value is frames[1].owner  # no copy after the read
    finally:
        outbox.close(0)
        inbox.close()


def test_messages_to_a_peer_not_listening_yet_wait_then_go_by_its_lane(ctx, lanes, tmp_path):
    secret = os.urandom(32)
    address = f"ipc://{tmp_path}/late.sock"
    outbox = Outbox(ctx, secret)
    for i in range(50):
        outbox.send(address, Notice("early", i))  # nothing listens: they wait, nobody blocks
    assert kinds(outbox, address) == "pending" and outbox.backlogged == {address}
    inbox = Inbox(ctx, secret, address)
    try:
        outbox.send(address, Notice("late", 50))
        got = pump_until(inbox, 51, outbox)
        assert [m.body for m, _ in got] == list(range(51))
        assert kinds(outbox, address) == "lane" and not outbox.backlogged
    finally:
        outbox.close(0)
        inbox.close()


def test_a_peer_without_lanes_is_reached_by_zmq_in_order(ctx, monkeypatch, tmp_path):
    secret = os.urandom(32)
    address = f"ipc://{tmp_path}/plain.sock"
    monkeypatch.setenv("MONARCH_LANES", "1")
    outbox = Outbox(ctx, secret)
    for i in range(20):
        outbox.send(address, Notice("early", i))  # before the peer is up: they wait
    monkeypatch.setenv("MONARCH_LANES", "0")
    inbox = Inbox(ctx, secret, address)  # a peer that has no lane
    try:
        assert inbox.lane is None
        got = pump_until(inbox, 20, outbox)
        outbox.send(address, Notice("later", 20))
        got += pump_until(inbox, 1, outbox)
        assert [m.body for m, _ in got] == list(range(21)) and kinds(outbox, address) == "zmq"
        other = Outbox(ctx, secret)  # a new link to it: zmq at once
        monkeypatch.setenv("MONARCH_LANES", "1")
        other.lanes = True
        other.send(address, Notice("x", 0))
        assert kinds(other, address) == "zmq"
        assert pump_until(inbox, 1)[0][0].topic == "x"
        other.close(0)
    finally:
        outbox.close(0)
        inbox.close()


def raw_lane(inbox: Inbox) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    assert inbox.lane is not None
    sock.connect(inbox.lane.path)
    return sock


def test_a_wrong_secret_is_refused_and_counted(ctx, lanes, tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/auth.sock")
    intruder = raw_lane(inbox)
    wrong = os.urandom(32)
    intruder.sendall(_lane.MAGIC + struct.pack("<I", len(wrong)) + wrong)
    body = encode(Notice("evil", 1))
    intruder.sendall(struct.pack("<IQ", 1, len(body)) + body)
    outbox = Outbox(ctx, secret)
    try:
        outbox.send(inbox.address, Notice("good", 1))
        got = pump_until(inbox, 1, outbox)
        pump_while(inbox, got, lambda: inbox.stats.denied_peers == 0,
                   "the wrong secret to be refused")
        assert [m.topic for m, _ in got] == ["good"]
        intruder.settimeout(20)
        assert intruder.recv(16) == b""  # refused: the listener closed it
    finally:
        intruder.close()
        outbox.close(0)
        inbox.close()


@pytest.mark.parametrize("garbage", [
    struct.pack("<I", 0),                       # a message of no parts
    struct.pack("<I", _lane.MAX_PARTS + 1),     # more parts than any message has
    b"GET / HTTP/1.1\r\n\r\n",                  # not even the magic
    struct.pack("<IQ", 1, 1 << 62),             # a part longer than MAX_PART
])
def test_garbage_on_a_lane_drops_that_connection_only(ctx, lanes, tmp_path, garbage):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/g.sock")
    peer = raw_lane(inbox)
    if not garbage.startswith(b"GET"):
        peer.sendall(_lane.MAGIC + struct.pack("<I", len(secret)) + secret)
        body = encode(Notice("before", 0))
        peer.sendall(struct.pack("<IQ", 1, len(body)) + body)
    peer.sendall(garbage)
    outbox = Outbox(ctx, secret)
    try:
        expected = [] if garbage.startswith(b"GET") else ["before"]
        got = pump_until(inbox, len(expected))
        refused = lambda: inbox.stats.bad_frames + inbox.stats.denied_peers  # noqa: E731
        pump_while(inbox, got, lambda: not refused(), "the garbage to be refused")
        assert refused() == 1
        peer.settimeout(20)
        assert peer.recv(16) == b""  # the listener closed it
        outbox.send(inbox.address, Notice("after", 1))  # the inbox still works
        got += pump_until(inbox, 1, outbox)
        assert [m.topic for m, _ in got] == [*expected, "after"]
    finally:
        peer.close()
        outbox.close(0)
        inbox.close()


def test_a_well_framed_message_that_is_not_one_is_counted_and_the_lane_goes_on(ctx, lanes,
                                                                                 tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/m.sock")
    peer = raw_lane(inbox)
    peer.sendall(_lane.MAGIC + struct.pack("<I", len(secret)) + secret)
    junk = b"\xc1not msgpack"
    peer.sendall(struct.pack("<IQ", 1, len(junk)) + junk)
    body = encode(Notice("fine", 2))
    peer.sendall(struct.pack("<IQ", 1, len(body)) + body)
    try:
        got = pump_until(inbox, 1)
        assert [m.topic for m, _ in got] == ["fine"] and inbox.stats.bad_frames == 1
    finally:
        peer.close()
        inbox.close()


def test_back_pressure_on_a_lane_then_a_dead_peer_raises_instead_of_hanging(ctx, lanes,
                                                                            tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/bp.sock")
    dead: set[str] = set()
    outbox = Outbox(ctx, secret, dead.__contains__)
    outbox.send(inbox.address, Notice("first", 0))
    assert kinds(outbox, inbox.address) == "lane"
    lane = outbox._links[inbox.address].lane
    result: list = []
    sent = 0

    def flood() -> None:
        nonlocal sent
        try:
            for i in range(1_000_000):  # nobody reads: the socket fills up
                outbox.send(inbox.address, Notice("x", i), [b"y" * 4096])
                sent += 1
        except PeerGone as exc:
            result.append(exc)

    thread = threading.Thread(target=flood)
    thread.start()
    try:
        wait_until(lambda: lane.backlog or not thread.is_alive(),
                   "the sender waits for its message to leave", interval=0.01)
        assert thread.is_alive() and sent < 1_000_000
        dead.add(inbox.address)  # the peer dies while the sender waits
        thread.join(timeout=10)
        assert not thread.is_alive() and isinstance(result[0], PeerGone)
    finally:
        dead.add(inbox.address)
        thread.join(timeout=10)
        outbox.close(0)
        inbox.close()


def test_a_lane_that_is_not_read_times_out(ctx, lanes, tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/slow.sock")
    outbox = Outbox(ctx, secret)
    outbox.delivery_timeout = 0.5
    try:
        with pytest.raises(PeerGone, match="not taken within 0.5 s"):
            for i in range(1_000_000):
                outbox.send(inbox.address, Notice("x", i), [b"y" * 65536])
        assert outbox.backlogged == {inbox.address}  # what is half in the stream still goes
    finally:
        outbox.close(0)
        inbox.close()


def test_loop_sends_queue_and_close_lets_them_leave(ctx, lanes, tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/q.sock")
    outbox = Outbox(ctx, secret)
    payload = b"z" * 65536
    for i in range(256):  # 16 MiB: more than the socket holds (SNDBUF, doubled)
        outbox.send(inbox.address, Notice("q", [i, payload]), block=False)
    assert outbox.backlogged == {inbox.address}
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(pump_until(inbox, 256)))
    reader.start()
    try:
        outbox.close(linger_ms=20_000)  # writes what is queued while the reader reads
        reader.join(timeout=30)
        assert [m.body[0] for m, _ in got] == list(range(256))
        assert all(m.body[1] == payload for m, _ in got)
    finally:
        reader.join(timeout=30)
        inbox.close()


def test_a_lane_takes_megabytes_before_its_reader_runs(ctx, lanes, tmp_path):
    """A lane asks for a big send buffer (`_lane.SNDBUF`, which the kernel caps at
    net.core.wmem_max): a big part crosses in a few turns of the two threads, not hundreds of
    ~200 KiB ones (the default buffer)."""
    with open("/proc/sys/net/core/wmem_max") as limit:
        size = min(2 << 20, int(limit.read()) // 2)
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/wide.sock")
    outbox = Outbox(ctx, secret)
    try:
        big = os.urandom(size)
        outbox.send(inbox.address, Call("s", "m", "f", "p", (), 0, 1, ((1, 1),), None, None,
                                        0, 1), [memoryview(big)], block=False)  # none reads yet
        assert kinds(outbox, inbox.address) == "lane"
        assert not outbox.backlogged and not outbox._links[inbox.address].lane.backlog
        (call, frames), = pump_until(inbox, 1)
        assert call.method == "f" and [f.bytes for f in frames] == [big]
    finally:
        outbox.close(0)
        inbox.close()


def test_a_peer_that_went_away_does_not_hang_a_sender(ctx, lanes, tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/gone.sock")
    outbox = Outbox(ctx, secret)
    try:
        outbox.send(inbox.address, Notice("one", 1))
        pump_until(inbox, 1, outbox)
        inbox.close()  # the peer's lane and its connections close
        for i in range(1000):  # lost, as with zmq to a peer whose death is not known yet
            outbox.send(inbox.address, Notice("lost", i), [b"w" * 1024])
        assert outbox._links[inbox.address].lane.broken
    finally:
        outbox.close(0)


def test_lane_paths_fit_a_unix_socket_and_name_one_endpoint_each():
    assert _lane.lane_path("ipc:///tmp/x/ctl.sock") == "/tmp/x/ctl.lane"
    assert _lane.lane_path("ipc://@monarch-job-ctl") == "\0monarch-job-ctl.lane"
    assert _lane.lane_path("tcp://127.0.0.1:5555") is None
    long_a = "ipc:///" + "d" * 120 + "/a.sock"
    long_b = "ipc:///" + "d" * 120 + "/b.sock"
    path_a, path_b = _lane.lane_path(long_a), _lane.lane_path(long_b)
    assert path_a.startswith("\0") and len(path_a) <= 107 and path_a != path_b
    assert _transport.is_private("ipc:///tmp/x/ctl.sock")


def test_a_send_on_a_lane_forgotten_meanwhile_is_peer_gone(ctx, lanes, tmp_path):
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/forgotten.sock")
    outbox = Outbox(ctx, secret)
    try:
        outbox.send(inbox.address, Notice("before", 0))
        assert kinds(outbox, inbox.address) == "lane"
        stale = outbox._links[inbox.address]
        outbox.forget(inbox.address)
        outbox._links[inbox.address] = stale  # as taken by the sender just before `forget`
        with pytest.raises(PeerGone):
            outbox.send(inbox.address, Notice("after", 1))
    finally:
        outbox.close(0)
        inbox.close()


def test_senders_that_find_the_lane_taken_leave_their_messages_to_the_holder(ctx, lanes,
                                                                            tmp_path):
    """A sender that finds the link's lock taken does not sleep on it: its message waits in
    the lane's `incoming`, and the holder writes it (several in one sendmsg), each sender's
    messages in its order, before the holder's own next one."""
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/taken.sock")
    outbox = Outbox(ctx, secret)
    try:
        outbox.send(inbox.address, Notice("first", 0))
        assert kinds(outbox, inbox.address) == "lane"
        link = outbox._links[inbox.address]
        with link.lock:  # the test thread is the holder, busy writing
            senders = [threading.Thread(target=lambda k=k: [
                outbox.send(inbox.address, Notice(f"t{k}", i)) for i in range(100)])
                for k in range(6)]
            for t in senders:
                t.start()
            for t in senders:  # none waits for the lock: each returns with its 100 queued
                t.join(timeout=20)
                assert not t.is_alive()
            assert len(link.lane.incoming) == 600
        outbox.send(inbox.address, Notice("holder", 1))  # takes the lock, writes them all
        assert not link.lane.incoming
        got = pump_until(inbox, 602)
        assert got[0][0].topic == "first" and got[-1][0].topic == "holder"
        for k in range(6):
            assert [m.body for m, _ in got if m.topic == f"t{k}"] == list(range(100))
        assert inbox.stats.bad_frames == 0
    finally:
        outbox.close(0)
        inbox.close()


@pytest.mark.parametrize("holder", ["send", "flush"])
def test_a_message_left_while_the_holder_writes_leaves_before_the_holder_returns(
        ctx, lanes, tmp_path, holder):
    """A sender that finds the lock taken returns at once, its message left in `incoming`;
    the holder (a sender, or the loop's flush) looks again after it lets the lock go."""
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/left.sock")
    outbox = Outbox(ctx, secret)
    try:
        outbox.send(inbox.address, Notice("first", 0))
        lane = outbox._links[inbox.address].lane
        real, others = lane.put_incoming, []

        def put_while_another_sends() -> None:
            real()
            if not others:  # once, while this thread holds the lock
                other = threading.Thread(
                    target=lambda: outbox.send(inbox.address, Notice("other", 2)))
                others.append(other)
                other.start()
                other.join(timeout=10)
                assert not other.is_alive()  # it did not wait for the lock
                assert len(lane.incoming) == 1

        lane.put_incoming = put_while_another_sends
        if holder == "send":
            outbox.send(inbox.address, Notice("holder", 1))
        else:
            outbox.backlogged.add(inbox.address)
            outbox.flush()
        assert others and not lane.incoming
        topics = [m.topic for m, _ in pump_until(inbox, 3 if holder == "send" else 2)]
        assert topics == (["first", "holder", "other"] if holder == "send"
                          else ["first", "other"])
    finally:
        outbox.close(0)
        inbox.close()


def test_many_threads_sending_at_once_strand_nothing(ctx, lanes, tmp_path):
    """Threads racing for one lane: whoever holds the lock writes what the others left, and
    looks again after it lets go, so every message arrives, each thread's in its order."""
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/race.sock")
    outbox = Outbox(ctx, secret)
    threads, each = 16, 400
    try:
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(
            pump_until(inbox, threads * each, timeout=40)))
        reader.start()
        senders = [threading.Thread(target=lambda k=k: [
            outbox.send(inbox.address, Notice(f"t{k}", [i, "x" * (i % 7)]))
            for i in range(each)]) for k in range(threads)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(timeout=30)
        reader.join(timeout=45)
        assert len(got) == threads * each
        for k in range(threads):
            assert [m.body[0] for m, _ in got if m.topic == f"t{k}"] == list(range(each))
        assert inbox.stats.bad_frames == 0
    finally:
        outbox.close(0)
        inbox.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_messages_cut_anywhere_by_the_stream_come_out_whole(ctx, lanes, tmp_path, seed):
    """The stream may split a message at any byte (and join several): the reader keeps what
    is left over and hands out exactly the messages that were written."""
    import random

    rnd = random.Random(seed)
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/cut.sock")
    peer = raw_lane(inbox)
    frames = [os.urandom(rnd.choice([0, 1, 100, 70_000, _lane.BIG + 3])) for _ in range(12)]
    stream = bytearray(_lane.MAGIC + struct.pack("<I", len(secret)) + secret)
    for i, frame in enumerate(frames):
        envelope = encode(Call("s", "m", "f", "p", (), 0, 1, ((i + 1, 1),), None, None, 0, 1))
        stream += struct.pack("<IQQ", 2, len(envelope), len(frame)) + envelope + frame
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(pump_until(inbox, len(frames))))
    reader.start()
    try:
        at = 0
        while at < len(stream):
            step = rnd.choice([1, 2, 7, 13, 4096, 65_537, 300_000])
            peer.sendall(stream[at:at + step])
            at += step
        reader.join(timeout=30)
        assert [call.seqs for call, _ in got] == [((i + 1, 1),) for i in range(len(frames))]
        assert [parts[0].bytes for _, parts in got] == frames
        assert inbox.stats.bad_frames == 0
    finally:
        peer.close()
        reader.join(timeout=30)
        inbox.close()


def test_messages_for_an_address_where_nobody_comes_go_to_zmq_in_the_end(ctx, lanes,
                                                                         monkeypatch, tmp_path):
    """A link does not wait for a lane forever (a peer that never came, or one that ended
    cleanly and took its sockets with it): it turns zmq, which keeps the messages and delivers
    them, in order, if a peer ever listens there."""
    monkeypatch.setattr(_transport, "PENDING_S", 0.2)
    secret = os.urandom(32)
    address = f"ipc://{tmp_path}/never.sock"
    outbox = Outbox(ctx, secret)
    try:
        for i in range(5):
            outbox.send(address, Notice("early", i))
        wait_until(lambda: (outbox.flush(), kinds(outbox, address) == "zmq")[1],
                   "the link turned zmq", interval=0.02)
        assert not outbox.backlogged
        monkeypatch.setenv("MONARCH_LANES", "0")
        inbox = Inbox(ctx, secret, address)  # someone listens after all (zmq only)
        try:
            outbox.send(address, Notice("late", 5))
            assert [m.body for m, _ in pump_until(inbox, 6)] == list(range(6))
        finally:
            inbox.close()
    finally:
        outbox.close(0)


@pytest.mark.parametrize("flag, on", [(None, True), ("1", True), ("", True), ("YES", True),
                                      ("on", True), ("0", False), ("false", False),
                                      ("Off", False), (" no ", False)])
def test_lanes_are_on_unless_switched_off(monkeypatch, flag, on):
    if flag is None:
        monkeypatch.delenv("MONARCH_LANES", raising=False)
    else:
        monkeypatch.setenv("MONARCH_LANES", flag)
    assert _lane.enabled() is on


@pytest.mark.parametrize("flag", ["2", "nope", "of"])
def test_a_lanes_switch_neither_on_nor_off_is_refused(monkeypatch, flag):
    monkeypatch.setenv("MONARCH_LANES", flag)
    with pytest.raises(ValueError, match=f"MONARCH_LANES='{flag}': expected one of "
                                         "1/true/on/yes \\(on\\) or 0/false/off/no \\(off\\)"):
        _lane.enabled()


# -- in a real job -------------------------------------------------------------------------

SCRIPT = textwrap.dedent('''
    import json, os, socket, struct

    from monarch._runtime import _process_runtime as _process
    from monarch.actor import Actor, current_rank, endpoint, this_host


    def lanes_of(runtime):
        """(links that are lanes, links that are zmq, accepted lane connections)"""
        links = list(runtime.outbox._links.values())
        listener = runtime.inbox.lane
        return (sum(link.lane is not None for link in links),
                sum(link.sock is not None for link in links),
                len(listener.conns) if listener is not None else -1)


    class Peer(Actor):
        def __init__(self):
            self.seen = []

        @endpoint
        def echo(self, x):
            return x

        @endpoint
        def note(self, i):
            self.seen.append(i)

        @endpoint
        def notes(self):
            return self.seen

        @endpoint
        def lanes(self):
            return lanes_of(_process.current())

        @endpoint
        def stats(self):
            s = _process.current().inbox.stats
            return s.received, s.denied_peers, s.bad_frames

        @endpoint
        def lane_path(self):
            return _process.current().inbox.lane.path

        @endpoint
        def relay(self, big):
            """Peer to peer: rank 0 sends to rank 1 and gets it back."""
            other = self.peers.slice(gpus=1)
            return other.echo.call_one(big).get()

        @endpoint
        def know(self, peers):
            self.peers = peers


    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("peers", Peer)
    one = mesh.slice(gpus=0)
    out = {}
    big = os.urandom(9 << 20)
    out["echo_big"] = one.echo.call_one(big).get(timeout=60) == big
    for i in range(300):
        one.note.broadcast(i)
    out["in_order"] = one.notes.call_one().get(timeout=60) == list(range(300))
    out["broadcast"] = sorted(mesh.echo.call(7).get(timeout=60).values())
    mesh.know.call(mesh).get(timeout=60)
    out["relay_big"] = one.relay.call_one(big).get(timeout=60) == big
    mesh.slice(gpus=1).echo.call_one(1).get(timeout=60)  # a link to each proc, for the count
    out["controller"] = lanes_of(_process.current())
    out["procs"] = sorted(mesh.lanes.call().get(timeout=60).values())

    # garbage and a wrong secret on rank 1's lane: refused, counted, it keeps serving
    path = mesh.slice(gpus=1).lane_path.call_one().get(timeout=60)
    for payload in (b"garbage that is no lane client", b"MONARCH-LANE-1\\0\\0" +
                    struct.pack("<I", 32) + os.urandom(32)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(payload)
        s.settimeout(60)
        assert s.recv(16) == b"", "the lane kept a connection it should have refused"
        s.close()
    out["after_garbage"] = mesh.slice(gpus=1).echo.call_one(5).get(timeout=60)
    out["stats"] = mesh.slice(gpus=1).stats.call_one().get(timeout=60)
    procs.stop().get(timeout=60)
    print(json.dumps(out))
''')


@pytest.mark.timeout(180)
def test_a_job_with_lanes_talks_over_them(tmp_path):
    script = tmp_path / "lanes_job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_LANES"}  # the default: on
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=150, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["echo_big"] and out["in_order"] and out["relay_big"]
    assert out["broadcast"] == [7, 7]
    lanes, zmq_links, accepted = out["controller"]
    assert lanes >= 2 and zmq_links == 0  # to both procs, none by zmq
    assert accepted >= 2  # both procs answer over lanes
    for proc_lanes, proc_zmq, proc_accepted in out["procs"]:
        assert proc_lanes >= 1 and proc_zmq == 0 and proc_accepted >= 1
    assert out["after_garbage"] == 5
    received, denied, bad = out["stats"]
    assert received > 0 and denied == 2 and bad == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flag", ["0", "off"])
def test_lanes_are_off_when_asked(tmp_path, flag):
    script = tmp_path / "no_lanes_job.py"
    script.write_text(textwrap.dedent('''
        from monarch._runtime import _process_runtime as _process
        from monarch.actor import Actor, endpoint, this_host

        class P(Actor):
            @endpoint
            def lane(self):
                return _process.current().inbox.lane is not None

        procs = this_host().spawn_procs(per_host={"gpus": 1})
        print(procs.spawn("p", P).lane.call_one().get(timeout=60),
              _process.current().inbox.lane is not None)
        procs.stop().get(timeout=60)
    '''))
    env = {**os.environ, "MONARCH_LANES": flag}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=150, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]  # the proc's inbox, the controller's
