"""zmq transport: one authenticated inbox per process, one outbound link per destination.

Auth: every inbox requires the per-job secret. On ipc and loopback tcp the mechanism is PLAIN
(the secret as password); on other tcp addresses it is CURVE with a keypair derived from the
secret, so the secret never crosses a network in the clear. The ZAP handler is polled by the
inbox owner's loop (no extra thread); handshake failures are seen through a socket monitor.
Nothing from an unauthenticated peer reaches the decoder; garbage from an authenticated peer is
dropped and counted by `Inbox.recv_nowait`.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import os
import socket
import threading
import time
from typing import Any, Callable, Sequence

import zmq
import zmq.utils.monitor
import zmq.utils.z85

from . import _lane
from ._answers import HeldAnswers
from ._held import HeldCalls
from . import _signals
from ._messages import Call, WireError, decode, encode

_ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_USER = b"monarch"
PENDING_S = 10.0
"""How long messages wait for a lane at an address where nothing listens yet before the link
turns zmq (a peer that never came, or one that went away cleanly)."""

HWM = 100_000
"""Messages queued per link before a blocking sender waits (back-pressure)."""


# plain ints: zmq's constants are enums, and every operation on one builds a new enum member
# (~1 µs each, several per message)
_EVENTS, _POLLIN, _RCVMORE, _NOBLOCK = (int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE),
                                        int(zmq.NOBLOCK))


class PeerGone(Exception):
    """The destination of a send is known to be dead (or did not take the message in time);
    the message was not sent."""

    def __init__(self, address: str, reason: str | None = None) -> None:
        super().__init__(address if reason is None else f"{address}: {reason}")
        self.address = address
        self.reason = reason


@dataclasses.dataclass(slots=True)
class InboxStats:
    """Counters of what the inbox refused. Mutated only by the inbox's owner thread."""

    received: int = 0
    bad_frames: int = 0
    denied_peers: int = 0
    failed_handshakes: int = 0


def curve_keys(secret: bytes) -> tuple[bytes, bytes]:
    """The job's CURVE (public, secret) keypair, z85-encoded, derived from the job secret."""
    secret_key = zmq.utils.z85.encode(secret[:32].ljust(32, b"\0"))
    return zmq.curve_public(secret_key), secret_key


def is_private(endpoint: str) -> bool:
    """True for ipc and loopback tcp endpoints (PLAIN is enough there)."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint.removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")
    if host in ("localhost", "*"):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def inherited_fd(endpoint: str) -> tuple[str, int | None]:
    """`tcp://HOST:fdN` names a listening TCP socket inherited as file descriptor N: returns
    (`tcp://HOST:PORT` with the port it is bound to, N); any other endpoint as is, None."""
    if not endpoint.startswith("tcp://"):
        return endpoint, None
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    if not (port.startswith("fd") and port[2:].isdigit()):
        return endpoint, None
    fd = int(port[2:])
    with socket.socket(fileno=os.dup(fd)) as bound:
        bound_port = bound.getsockname()[1]
        bound.listen(128)  # zmq takes it as a listening socket; a merely bound one is fine too
    return f"tcp://{host}:{bound_port}", fd


class Inbox:
    """The process's bound receiving socket, with its ZAP handler and handshake monitor.

    Owned by one thread (the process's I/O loop): call `recv_nowait`, `service_zap` and
    `service_monitor` from that thread only, when `poll_sockets()` report readiness.
    """

    def __init__(self, ctx: zmq.Context, secret: bytes, endpoint: str,
                 advertise: str | None = None) -> None:
        """`advertise`: the address peers dial when it is not `endpoint` (a worker bound to a
        wildcard behind NAT); it decides the auth mechanism, as it is what peers see."""
        self._secret = secret
        self._zap = ctx.socket(zmq.ROUTER)
        self._zap.linger = 0
        self._zap.bind(_ZAP_ENDPOINT)
        self._ctx = ctx
        self.lane: _lane.Listener | None = None
        """The lane beside an ipc inbox (`_lane`), when lanes are on."""
        if advertise is None and endpoint.startswith("ipc://") and _lane.enabled():
            try:
                self.lane = _lane.Listener(endpoint, secret)
            except OSError:
                self.lane = None  # zmq only: senders find no lane and keep to zmq
        self._sock, self._monitor = self._listen(endpoint, advertise)
        self.address: str = advertise or self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.extra: list[tuple[zmq.Socket, zmq.Socket]] = []
        """Further listening sockets (a tcp one besides ipc), each with its monitor."""
        self.stats = InboxStats()

    def _listen(self, endpoint: str,
                advertise: str | None = None) -> tuple[zmq.Socket, zmq.Socket]:
        sock = self._ctx.socket(zmq.PULL)
        sock.linger = 0
        sock.rcvhwm = HWM
        sock.zap_domain = b"monarch"
        if is_private(advertise or endpoint):
            sock.plain_server = True
        else:
            sock.curve_server = True
            sock.curve_secretkey = curve_keys(self._secret)[1]
        monitor = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        endpoint, fd = inherited_fd(endpoint)
        if fd is not None:
            sock.setsockopt(zmq.USE_FD, fd)  # serve on the listening socket we were given
        _bind(sock, endpoint)
        return sock, monitor

    def listen_also(self, endpoint: str) -> str:
        """Binds one more listening socket (e.g. tcp beside ipc); returns its address. Owner
        thread only; poll `poll_sockets()` again afterwards."""
        sock, monitor = self._listen(endpoint)
        self.extra.append((sock, monitor))
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def poll_sockets(self) -> tuple[zmq.Socket, zmq.Socket, zmq.Socket]:
        """The main sockets to poll for input: (messages, zap, monitor)."""
        return self._sock, self._zap, self._monitor

    def recv_nowait(self, sock: zmq.Socket | None = None) -> tuple[Any, list[zmq.Frame]] | None:
        """The next well-formed message on `sock` (default: the main one) and its extra frames,
        or None when none is waiting."""
        sock = sock or self._sock
        while True:
            # asking first: a recv that finds nothing raises zmq.Again, which costs ~3x more
            if not sock.getsockopt(_EVENTS) & _POLLIN:  # type: ignore[operator]
                return None
            try:
                # a Frame: `.more` is read without a getsockopt (each builds an enum member)
                head = sock.recv(_NOBLOCK, copy=False)
            except zmq.Again:
                return None
            more = head.more
            try:
                msg = decode(head.buffer)
            except WireError:
                if more:
                    self._drop(sock)
                self.stats.bad_frames += 1
                continue
            frames = self._recv_frames(sock, getattr(msg, "nframes", 0), more)
            if frames is None:
                continue
            self.stats.received += 1
            return msg, frames

    def lane_message(self, parts: list[zmq.Frame]) -> tuple[Any, list[zmq.Frame]] | None:
        """The message whose parts came whole through a lane, or None (counted bad) when it
        is not well-formed."""
        try:
            msg = decode(parts[0].buffer)
        except WireError:
            self.stats.bad_frames += 1
            return None
        if getattr(msg, "nframes", 0) != len(parts) - 1:
            self.stats.bad_frames += 1
            return None
        self.stats.received += 1
        return msg, parts[1:]

    def _recv_frames(self, sock: zmq.Socket, count: int, more: bool) -> list[zmq.Frame] | None:
        """The message's `count` extra frames; None (counted bad, the rest of the message
        dropped) when it has fewer or more."""
        frames = []
        for _ in range(count):
            if not more:
                self.stats.bad_frames += 1
                return None
            frame = sock.recv(copy=False)
            frames.append(frame)
            more = frame.more
        if more:
            self._drop(sock)
            self.stats.bad_frames += 1
            return None
        return frames

    def _drop(self, sock: zmq.Socket) -> None:
        """Reads and discards the rest of a multipart message."""
        while sock.getsockopt(_RCVMORE):
            sock.recv()

    def service_zap(self) -> None:
        """Answers pending ZAP requests: the job secret is the only accepted credential."""
        while True:
            try:
                request = self._zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._zap.send_multipart(self._zap_answer(request))

    def _zap_answer(self, request: list[bytes]) -> list[bytes]:
        envelope, _, rest = _split_zap(request)
        ok = False
        if len(rest) >= 6 and rest[0] == b"1.0":
            mechanism, credentials = rest[5], rest[6:]
            if mechanism == b"PLAIN" and len(credentials) == 2:
                ok = credentials[0] == _USER and credentials[1] == self._secret
            elif mechanism == b"CURVE" and len(credentials) == 1:
                ok = zmq.utils.z85.encode(credentials[0]) == curve_keys(self._secret)[0]
        if not ok:
            self.stats.denied_peers += 1
        request_id = rest[1] if len(rest) > 1 else b""
        code, text = (b"200", b"OK") if ok else (b"400", b"denied")
        return [*envelope, b"", b"1.0", request_id, code, text, _USER if ok else b"", b""]

    def service_monitor(self, monitor: zmq.Socket | None = None) -> None:
        """Counts failed handshakes (wrong mechanism, garbage instead of ZMTP)."""
        monitor = monitor or self._monitor
        while True:
            try:
                zmq.utils.monitor.recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            self.stats.failed_handshakes += 1

    def close(self) -> None:
        for sock, monitor in [(self._sock, self._monitor), *self.extra]:
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
        self._zap.close(0)
        if self.lane is not None:
            self.lane.close()


BIND_RETRY_S = 2.0
"""How long a fixed tcp port that is in use is tried again: a port just picked by probing (bind
to port 0, close) or just released may be held for a moment by another process."""


def _bind(sock: zmq.Socket, endpoint: str) -> None:
    deadline = time.monotonic() + BIND_RETRY_S
    while True:
        try:
            sock.bind(endpoint)
            return
        except zmq.ZMQError as exc:
            fixed = endpoint.startswith("tcp://") and not endpoint.endswith((":0", ":*"))
            if exc.errno != zmq.EADDRINUSE or not fixed or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _split_zap(request: list[bytes]) -> tuple[list[bytes], bytes, list[bytes]]:
    try:
        i = request.index(b"")
    except ValueError:
        return [], b"", request
    return request[:i], b"", request[i + 1:]


@dataclasses.dataclass(slots=True)
class _Link:
    sock: Any
    """The zmq PUSH socket; None for a lane, or while the link is pending."""
    lock: threading.Lock
    backlog: collections.deque
    lane: _lane.Link | None = None
    """Set when the link is a lane (then `backlog` is unused)."""
    closed: bool = False
    """Forgotten (its peer died) or the outbox closed: a sender that took the link just before
    gets PeerGone, not an error of a closed socket."""
    pending: bool = False
    """Lanes on, and nothing listens at the address yet: messages wait in `backlog` until the
    peer listens, then go by its lane, or by zmq when it has none (`Outbox._resolve`)."""
    next_try: float = 0.0
    since: float = 0.0
    """When the link was made (a pending link turns zmq after `PENDING_S`)."""


class Outbox:
    """Outbound links, one PUSH socket per destination address, shared by all threads.

    `send(block=True)` is for user and actor threads: it waits while the link is full
    (back-pressure) and raises PeerGone if the destination dies meanwhile. `send(block=False)` is
    for the I/O loop: a full link keeps the message in a backlog that `flush()` retries, in order.
    """

    def __init__(self, ctx: zmq.Context, secret: bytes,
                 is_dead: Callable[[str], bool] = lambda address: False) -> None:
        self._ctx = ctx
        self._secret = secret
        self._is_dead = is_dead
        self._links: dict[str, _Link] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.credentials: dict[str, bytes] = {}
        """Secrets for destinations outside this job's trust domain (e.g. host workers)."""
        self.delivery_timeout = 30.0
        """Seconds a blocking send waits at a full link before it gives up (PeerGone)."""
        self.backlogged: set[str] = set()
        """Addresses with a backlog: added to by any thread's non-blocking send (`_backlog`),
        emptied by the loop's flush."""
        self.lanes = _lane.enabled()
        """New links to ipc addresses try a lane first (`_lane`)."""
        self.held = HeldCalls(self._send_held, self._report_lost)
        """Calls of user threads held for a burst (`_held`); released before any other send."""
        self.answers = HeldAnswers(self._send_answers, self.backlogged.__contains__)
        """Answers of actors that finished together, held per destination (`_answers`);
        those for a destination leave before any other message to it."""
        self.on_held_lost: Callable[[str, Any, str | None], None] | None = None
        """Told of a held message that could not be sent (address, message, why): its callers
        are answered there, as a send raising PeerGone would have made them be."""
        self.on_backlog: Callable[[], None] | None = None
        """Called when a first message waits in a backlog: the loop must flush it (a leader
        may be in a long poll)."""
        self._lost: list[tuple[str, Any, str | None]] = []

    def send(self, address: str, msg: Any, frames: Sequence[Any] = (), block: bool = True) -> None:
        """Sends a message (envelope + frames) to `address`, in order per link."""
        self.send_raw(address, [encode(msg), *frames], block)

    def _backlog(self, address: str) -> None:
        first = not self.backlogged
        self.backlogged.add(address)
        if first and self.on_backlog is not None:
            self.on_backlog()

    def hold(self, address: str, call: Call, frames: list[Any]) -> bool:
        """Holds a Call for `address` until the next release (`_held`); True
        when nothing was held before. Raises PeerGone once the outbox is closed."""
        if self._closed:
            raise PeerGone(address)
        return self.held.hold(address, call, frames)

    def _send_held(self, address: str, msg: Any, frames: list[Any], block: bool) -> None:
        if self._is_dead(address):  # its death answered the callers already
            self._lost.append((address, msg, None))  # reported once the lock is free
            return
        try:
            self._send_parts(address, [encode(msg), *frames], block)
        except PeerGone as exc:
            self._lost.append((address, msg, exc.reason))

    def _report_lost(self) -> None:
        if not self._lost:
            return
        lost, self._lost = self._lost, []
        if self.on_held_lost is not None:
            for address, msg, reason in lost:
                self.on_held_lost(address, msg, reason)

    def _send_answers(self, address: str, msg: Any, frames: list[Any], block: bool) -> None:
        """Sends a Reply or Replies (`answers`' send): calls held before go first; a dead
        destination drops it, as `ProcessRuntime.reply` drops an answer to one."""
        try:
            self.held.release_first(block)
            self._send_parts(address, [encode(msg), *frames], block)
        except PeerGone:
            pass

    def send_raw(self, address: str, parts: list[Any], block: bool = True) -> None:
        """Sends already-encoded parts; see `send`. Calls held before are sent first, and the
        answers held for `address`."""
        self.held.release_first(block)
        if self.answers.busy():
            self.answers.release(address, block)
        self._send_parts(address, parts, block)

    def _send_parts(self, address: str, parts: list[Any], block: bool) -> None:
        link = self._links.get(address) or self._connect(address)
        if link.lane is None and link.pending:
            with link.lock:
                if link.closed:
                    raise PeerGone(address)
                if link.pending:
                    self._resolve(address, link)
                if link.pending:
                    if block and len(link.backlog) >= HWM:
                        raise PeerGone(address, "nothing listens there yet and "
                                                f"{HWM} messages already wait for it")
                    link.backlog.append(parts)
                    self._backlog(address)
                    return
        if link.lane is not None:
            self._send_lane(address, link, link.lane, parts, block)
            return
        with link.lock:
            if link.closed:
                raise PeerGone(address)
            if not link.backlog and _try_send(link.sock, parts):
                return
            if not block:
                link.backlog.append(parts)
                self._backlog(address)
                return
        self._send_blocking(address, link, parts)

    def _send_blocking(self, address: str, link: _Link, parts: list[Any]) -> None:
        delay = 0.0002
        deadline = time.monotonic() + self.delivery_timeout
        while True:
            if self._is_dead(address):
                raise PeerGone(address)
            if self._closed:
                raise PeerGone(address)
            if time.monotonic() > deadline:
                raise PeerGone(address, f"the message was not taken within "
                                        f"{self.delivery_timeout:g} s (message_delivery_timeout)")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            with link.lock:
                if link.closed:
                    raise PeerGone(address)
                if not link.backlog and _try_send(link.sock, parts):
                    return

    def _send_lane(self, address: str, link: _Link, lane: _lane.Link, parts: list[Any],
                   block: bool) -> None:
        """Sends by a lane. The message joins the lane's `incoming` first: a sender that finds
        the lock taken leaves it there for the holder to write, instead of sleeping on the lock
        (16 actors of a proc answering at once made a convoy of lock sleeps and wakes); it
        waits its turn only when the link is full (back-pressure). The holder writes what
        waits (several messages in one sendmsg) and looks again after it lets the lock go, so
        nothing a sender left behind is stranded."""
        lane.incoming.append(parts)
        lock = link.lock
        if threading.get_ident() == _signals.MAIN:
            # Signal handlers run on this thread, at the check after a call returns: an
            # exception raised between `acquire` and `try` would hold the lock for good (later
            # senders leave their messages to a holder that is gone). `with` has no such
            # window; its cost, waiting for a holder that writes without blocking, is small.
            with lock:
                _signals.depth += 1  # no KeyboardInterrupt between a write and its count
                try:
                    mark = self._put_locked(address, link, lane, block)
                finally:
                    _signals.depth -= 1
            if _signals.pending:
                _signals.fire()
        else:
            if not lock.acquire(False):
                if link.closed or self._is_dead(address):
                    raise PeerGone(address)
                if not block or not lane.backlog:
                    return  # the holder writes it
                lock.acquire()
            try:
                mark = self._put_locked(address, link, lane, block)
            finally:
                lock.release()
        self._put_left(address, link, lane)
        if not mark:
            return
        deadline = time.monotonic() + self.delivery_timeout
        while True:
            if self._is_dead(address) or self._closed:
                raise PeerGone(address)
            if time.monotonic() > deadline:
                self._backlog(address)  # what is in the stream must still leave whole
                raise PeerGone(address, f"the message was not taken within "
                                        f"{self.delivery_timeout:g} s (message_delivery_timeout)")
            lane.wait_writable(0.05)
            with link.lock, _signals.DEFERRED:
                if link.closed:
                    raise PeerGone(address)
                lane.put_incoming()
                lane.write()
                done = lane.written >= mark or lane.broken
            self._put_left(address, link, lane)
            if done:
                return

    def _put_locked(self, address: str, link: _Link, lane: _lane.Link, block: bool) -> int:
        """Writes what waits in `lane.incoming` (the caller holds the lock); returns the mark
        a blocking sender waits for (0: none)."""
        if link.closed:
            raise PeerGone(address)
        lane.put_incoming()
        mark = lane.queued if block and lane.backlog else 0
        if lane.backlog:
            self._backlog(address)
        return mark

    def _put_left(self, address: str, link: _Link, lane: _lane.Link) -> None:
        """Writes what senders left in `lane.incoming` while this thread held the lock,
        unless another thread holds it now (that one writes it; the main thread waits for
        it instead, see `_send_lane`)."""
        lock = link.lock
        if threading.get_ident() == _signals.MAIN:
            while lane.incoming:
                with lock, _signals.DEFERRED:
                    self._write_left(address, link, lane)
            return
        while lane.incoming and lock.acquire(False):
            try:
                self._write_left(address, link, lane)
            finally:
                lock.release()

    def _write_left(self, address: str, link: _Link, lane: _lane.Link) -> None:
        if link.closed:
            lane.incoming.clear()
            return
        lane.put_incoming()
        if lane.backlog:
            self._backlog(address)

    def flush(self) -> None:
        """Retries backlogged messages (I/O loop only); drops those for dead peers, counted."""
        for address in list(self.backlogged):
            link = self._links.get(address)
            if link is None:
                self.backlogged.discard(address)
                continue
            if link.pending:
                with link.lock:
                    if self._is_dead(address):
                        link.backlog.clear()
                        self.backlogged.discard(address)
                        continue
                    if link.pending and time.monotonic() >= link.next_try:
                        self._resolve(address, link)
                    if link.pending:
                        continue
            if link.lane is not None:
                with link.lock:
                    if self._is_dead(address):
                        link.lane.broken = True
                    link.lane.put_incoming()
                    if link.lane.write():
                        self.backlogged.discard(address)
                self._put_left(address, link, link.lane)
                continue
            with link.lock:
                while link.backlog:
                    if self._is_dead(address):
                        link.backlog.clear()
                        break
                    if not _try_send(link.sock, link.backlog[0]):
                        break
                    link.backlog.popleft()
                if not link.backlog:
                    self.backlogged.discard(address)

    def _connect(self, address: str) -> _Link:
        with self._lock:
            link = self._links.get(address)
            if link is not None:
                return link
            if self._closed:
                raise PeerGone(address)
            link = _Link(None, threading.Lock(), collections.deque(), since=time.monotonic())
            if self.lanes and _lane.lane_path(address) is not None:
                link.pending = True
                self._resolve(address, link)
            else:
                link.sock = self._zmq_socket(address)
            self._links[address] = link
            return link

    def _resolve(self, address: str, link: _Link) -> None:
        """Makes a pending link a lane (the peer listens on one) or a zmq link (the peer's
        zmq inbox is there, its lane is not: it has none, as a lane is bound before the inbox);
        moves what waited, in order. Caller holds `link.lock` (or owns the new link)."""
        lane = _lane.Link.connect(address, self.credentials.get(address, self._secret))
        if lane is not None:
            link.lane = lane
            link.pending = False
            for parts in link.backlog:
                lane.put(parts)
            link.backlog.clear()
        elif not _lane.can_wait(address) or time.monotonic() - link.since > PENDING_S:
            # a peer without a lane; or nobody came: zmq from now on, which keeps the messages
            # and connects if the peer ever listens (as without lanes), instead of this
            # process looking forever
            link.sock = self._zmq_socket(address)
            link.pending = False
            while link.backlog and _try_send(link.sock, link.backlog[0]):
                link.backlog.popleft()
        else:
            link.next_try = time.monotonic() + 0.002

    def _zmq_socket(self, address: str) -> zmq.Socket:
        sock = self._ctx.socket(zmq.PUSH)
        sock.sndhwm = HWM
        sock.linger = 2000
        sock.reconnect_ivl = 10
        sock.reconnect_ivl_max = 500
        secret = self.credentials.get(address, self._secret)
        if is_private(address):
            sock.plain_username = _USER
            sock.plain_password = secret
        else:
            public, secret_key = curve_keys(secret)
            sock.curve_serverkey = public
            sock.curve_publickey = public
            sock.curve_secretkey = secret_key
        sock.connect(address)
        return sock

    def forget(self, address: str) -> None:
        """Closes the link to a peer that is gone, dropping whatever it still queued."""
        with self._lock:
            link = self._links.pop(address, None)
        if link is not None:
            with link.lock:
                link.closed = True
                if link.lane is not None:
                    link.lane.close()
                elif link.sock is not None:
                    link.sock.close(0)
        self.backlogged.discard(address)

    def close(self, linger_ms: int = 2000) -> None:
        """Closes every link, giving queued messages up to `linger_ms` to leave."""
        with self._lock:
            self._closed = True
            links = list(self._links.values())
            self._links.clear()
        deadline = time.monotonic() + linger_ms / 1000
        for link in links:
            if link.lane is not None:
                self._close_lane(link, link.lane, deadline)
                continue
            held = _take(link.lock, deadline)
            try:
                link.closed = True
                if link.sock is not None:
                    link.sock.close(linger_ms)
            finally:
                if held:
                    link.lock.release()

    @staticmethod
    def _close_lane(link: _Link, lane: _lane.Link, deadline: float) -> None:
        """Writes what the lane still holds (until `deadline`), then closes it."""
        while True:
            if not _take(link.lock, deadline):
                link.closed = True
                lane.close()
                return
            try:
                lane.put_incoming()
                if lane.write() or time.monotonic() >= deadline:
                    link.closed = True
                    lane.close()
                    return
            finally:
                link.lock.release()
            lane.wait_writable(min(0.05, max(0.0, deadline - time.monotonic())))


def _take(lock: threading.Lock, deadline: float) -> bool:
    """Takes `lock`, waiting until `deadline` at most (then False: close without it).

    A link's lock may be held for good at shutdown: an exception a signal handler raises on
    the main thread (a script's SIGTERM `sys.exit`, a fault's KeyboardInterrupt) can land
    between a sender's acquire and its `try`, and the lock is never released; closing waited
    on it forever (1 script in ~15 told to end by SIGTERM while calling in a loop)."""
    remaining = deadline - time.monotonic()
    return lock.acquire(timeout=remaining) if remaining > 0 else lock.acquire(False)


def _try_send(sock: zmq.Socket, parts: list[Any]) -> bool:
    try:
        if len(parts) == 1:
            sock.send(parts[0], _NOBLOCK, copy=False)
        else:
            sock.send_multipart(parts, _NOBLOCK, copy=False)
    except zmq.Again:
        return False
    return True
