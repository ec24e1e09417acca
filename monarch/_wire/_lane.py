"""Lanes: links between two processes of one host that bypass zmq's I/O threads.

A zmq message between two processes wakes four threads besides the two that send and receive
(each side's zmq I/O thread, see docs/CALL_PATH.md). A lane is a unix stream socket that the
sending thread writes and the receiving process's loop thread reads itself.

Every process whose inbox is an ipc endpoint also listens on a lane, at a path derived from
that endpoint (`lane_path`). A sender whose link to an ipc address is new tries the lane first
and keeps zmq for that link when no lane listens there, so a link is one stream or the other
for its whole life and its messages stay in order.

On the wire: the client opens with `MAGIC`, the secret's length (u32) and the secret; the
listener closes a connection whose secret is wrong (counted as a denied peer). Then each
message is `u32 parts` + `u64 length` per part + the parts. A connection that breaks the format
is closed (counted as a bad frame); what it sent before stays delivered.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import os
import select
import socket
import struct
from typing import Any

import zmq

from . import _received
from ._switch import switch

MAGIC = b"MONARCH-LANE-1\0\0"
MAX_PARTS = 1 << 16
"""More parts than this in one message is garbage, not a message."""

MAX_PART = 1 << 40
"""A part longer than this (1 TiB) is garbage: the connection is dropped."""

BIG = 1 << 20
"""A part at least this long is read straight into a buffer of its own, the memory of a `bytes`
object (`_received`): the read is its one copy."""

WHOLE = 1 << 16
"""A shorter part that arrives whole is a `bytes` object of its own too (the copy out of the
read's chunk), which a `bytes` payload is handed as it is (`_received.wrap`); below this, the
frame copies it (what a small part costs least as)."""

CHUNK = 1 << 16
"""How much one read takes at most when no big part is being filled."""

SNDBUF = 4 << 20
"""The send buffer a lane asks for (the kernel caps it at `net.core.wmem_max`, and doubles
it): with the default (~200 KiB) a 64 MiB part crosses in ~300 turns of the two threads."""

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SUN_PATH_MAX = 107


def enabled() -> bool:
    """Lanes are used unless the switch `MONARCH_LANES` is off (read when a process's runtime
    starts); then every link is zmq. Another value than on/off spellings raises ValueError."""
    return switch("MONARCH_LANES")


def lane_path(address: str) -> str | None:
    """The lane beside the ipc inbox `address` (an abstract name starts with NUL), or None
    when `address` is not ipc (other hosts: zmq only)."""
    if not address.startswith("ipc://"):
        return None
    path = address.removeprefix("ipc://")
    if path.startswith("@"):
        return "\0" + path[1:] + ".lane"
    lane = path.removesuffix(".sock") + ".lane"
    if len(lane) <= _SUN_PATH_MAX:
        return lane
    return "\0monarch-lane-" + hashlib.sha1(address.encode()).hexdigest()[:24]


def can_wait(address: str) -> bool:
    """True when a sender may hold messages for `address` until a lane listens there: its
    peer has not bound its inbox yet (a lane is bound first, so an inbox without one means a
    peer without lanes). An abstract name cannot be looked up: it never waits. (A peer that
    never comes: the link turns zmq after `_transport.PENDING_S`.)"""
    path = address.removeprefix("ipc://")
    return not path.startswith("@") and not os.path.exists(path)


class Listener:
    """The lane a process listens on, and the connections it accepted. Owned by the loop."""

    def __init__(self, address: str, secret: bytes) -> None:
        path = lane_path(address)
        if path is None:
            raise ValueError(f"no lane for {address!r}: lanes are for ipc endpoints")
        self.path = path
        self._secret = secret
        if not path.startswith("\0"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.conns: dict[int, Connection] = {}
        """fd -> accepted connection."""

    def accept(self) -> int:
        """Accepts what is waiting; returns how many connections were added."""
        added = 0
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return added
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ECONNABORTED):
                    return added
                raise
            sock.setblocking(False)
            conn = Connection(sock, self._secret)
            self.conns[sock.fileno()] = conn
            added += 1

    def drop(self, conn: Connection) -> None:
        self.conns.pop(conn.fd, None)
        conn.sock.close()

    def close(self) -> None:
        for conn in list(self.conns.values()):
            conn.sock.close()
        self.conns.clear()
        self.sock.close()
        if not self.path.startswith("\0"):
            try:
                os.unlink(self.path)
            except OSError:
                pass


class Connection:
    """One accepted lane: reads whole messages out of the stream."""

    def __init__(self, sock: socket.socket, secret: bytes) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self._secret = secret
        self.authed = False
        self.denied = False
        self.broken = False
        """The stream broke the format (or the auth): the connection must be dropped."""
        self._buf = bytearray()
        self._pos = 0
        self._lengths: list[int] | None = None
        self._parts: list[Any] = []
        self._big: zmq.Frame | None = None  # the big part being filled, and its view
        self._big_view: memoryview | None = None
        self._filled = 0

    def read(self, out: list[list[Any]]) -> bool:
        """Reads what is there; appends each whole message (its parts, as zmq Frames) to
        `out`. Returns False at the end of the stream (or once it is broken)."""
        while True:
            if self._big is not None:
                view = self._big_view
                assert view is not None
                try:
                    got = self.sock.recv_into(view[self._filled:])
                except (BlockingIOError, InterruptedError):
                    return True
                except OSError:
                    return False
                if got == 0:
                    return False
                self._filled += got
                if self._filled < len(view):
                    continue
                self._parts.append(self._big)
                self._big = self._big_view = None
                self._parse(out)
                if self.broken:
                    return False
                continue
            try:
                data = self.sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not data:
                return False
            if self._pos == len(self._buf):
                self._parse(out, data)  # nothing left over: parse the bytes as they came
            else:
                self._buf += data
                self._parse(out, self._buf)
            if self.broken:
                return False
            if len(out) >= 10_000:
                return True  # bounded, so timers and other inputs get their turn
            if len(data) < CHUNK and self._big is None:
                return True  # the socket is drained: skip the read that would find nothing

    def _parse(self, out: list[list[Any]], buf: bytes | bytearray | None = None) -> None:
        """Takes whole messages out of `buf` (what is left over, or the bytes just read when
        nothing was) from `_pos` on; keeps what is left in `_buf`. Hot path: one call per
        read on each side of every call; `buf` does not change in the loop, so its length is
        read once."""
        if buf is None:
            buf, pos = self._buf, self._pos
        else:
            pos = self._pos if buf is self._buf else 0
        end = len(buf)
        parts = self._parts
        while True:
            if not self.authed:
                if not MAGIC.startswith(buf[pos:pos + len(MAGIC)]):
                    self.denied = self.broken = True  # not a lane client: refused at once
                    return
                if end - pos < len(MAGIC) + 4:
                    break
                size = _U32.unpack_from(buf, pos + len(MAGIC))[0]
                start = pos + len(MAGIC) + 4
                if size > 4096:
                    self.denied = self.broken = True
                    return
                if end - start < size:
                    break
                if not hmac.compare_digest(bytes(buf[start:start + size]), self._secret):
                    self.denied = self.broken = True
                    return
                self.authed = True
                pos = start + size
                continue
            lengths = self._lengths
            if lengths is None:
                if end - pos < 4:
                    break
                count = _U32.unpack_from(buf, pos)[0]
                if count == 0 or count > MAX_PARTS:
                    self.broken = True
                    return
                if end - pos < 4 + 8 * count:
                    break
                lengths = self._lengths = list(
                    (_HEADS.get(count) or _head(count)).unpack_from(buf, pos))[1:]
                pos += 4 + 8 * count
            wanted = len(lengths)
            while len(parts) < wanted:
                size = lengths[len(parts)]
                if end - pos >= size:
                    part = buf[pos:pos + size]
                    if type(part) is not bytes:
                        part = bytes(part)
                    parts.append(zmq.Frame(part) if size < WHOLE else _received.wrap(part))
                    pos += size
                    continue
                if size >= BIG:
                    if size > MAX_PART:
                        self.broken = True
                        return
                    try:
                        self._big, self._big_view = _received.frame(size)
                    except MemoryError:
                        self.broken = True  # a length no message of ours has
                        return
                    self._big_view[:end - pos] = buf[pos:]
                    self._filled = end - pos
                    pos = end
                break
            if len(parts) < wanted:
                break
            out.append(parts)
            parts = self._parts = []
            self._lengths = None
        if pos == end:
            self._buf = bytearray()
            self._pos = 0
        elif buf is not self._buf:
            self._buf = bytearray(buf[pos:])  # the start of a message: kept for the next read
            self._pos = 0
        else:
            self._pos = pos
            if pos > CHUNK:
                del buf[:pos]
                self._pos = 0


_HEADS: dict[int, struct.Struct] = {}


def _head(count: int) -> struct.Struct:
    """The header of a message of `count` parts: the count, then each part's size."""
    head = struct.Struct(f"<I{count}Q")
    if count <= 64:
        _HEADS[count] = head
    return head


_IOV_BATCH = 256
"""Buffers (headers and parts) one sendmsg of several waiting messages takes at most (the
kernel's limit, IOV_MAX, is 1,024)."""


def _all_bytes(parts: list[Any]) -> bool:
    for part in parts:
        if type(part) is not bytes:
            return False
    return True


class Link:
    """The sending end of a lane (shared by the threads of the process; `lock` orders them).

    Writes never block while holding the lock: what the socket does not take waits in
    `backlog`, written by the next send or by `flush`; a blocking sender waits, without the
    lock, until its own message has left."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.backlog: collections.deque[memoryview] = collections.deque()
        self.queued = 0
        """Bytes ever handed to this link."""
        self.written = 0
        """Bytes ever written to the socket."""
        self.broken = False
        self.incoming: collections.deque[list[Any]] = collections.deque()
        """Messages of senders that found the lock taken (`Outbox._send_lane`): the holder
        writes them, in order, before it lets the lock go (`put_incoming`)."""

    @classmethod
    def connect(cls, address: str, secret: bytes) -> Link | None:
        """A lane to the process at `address`, or None when no lane listens there."""
        path = lane_path(address)
        if path is None:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        link = cls(sock)
        link.put([MAGIC + _U32.pack(len(secret)) + secret], raw=True)
        return link

    def put(self, parts: list[Any], raw: bool = False) -> None:
        """Queues one message of `parts` (`raw`: bytes to write as they are) and writes what
        the socket takes now. Caller holds the lock."""
        backlog = self.backlog
        if not backlog and not raw and not self.broken and _all_bytes(parts):
            self._put_now(parts)
            return
        header = bytearray(_U32.pack(len(parts))) if not raw else None
        at = len(backlog)
        total = 0
        for part in parts:
            view = part if type(part) is memoryview else memoryview(part)
            if view.ndim != 1 or view.itemsize != 1:
                view = view.cast("B")
            size = view.nbytes
            total += size
            if header is not None:
                header += _U64.pack(size)
            backlog.append(view)
        if header is not None:
            backlog.insert(at, memoryview(header))
            total += len(header)
        self.queued += total
        self.write()

    def put_incoming(self) -> None:
        """Puts the messages waiting in `incoming`, in order; runs of messages of bytes with
        nothing queued before them leave in one sendmsg. Caller holds the lock."""
        incoming = self.incoming
        while incoming:
            if self.backlog or self.broken or len(incoming) == 1:
                self.put(incoming.popleft())
                continue
            bufs: list[Any] = []
            total = 0
            while incoming and len(bufs) < _IOV_BATCH and _all_bytes(incoming[0]):
                parts = incoming.popleft()
                count = len(parts)
                head = _HEADS.get(count) or _head(count)
                sizes = [len(part) for part in parts]
                bufs.append(head.pack(count, *sizes))
                bufs += parts
                total += head.size + sum(sizes)
            if bufs:
                self._send_bufs(bufs, total)
            else:
                self.put(incoming.popleft())

    def _put_now(self, parts: list[bytes]) -> None:
        """`put` of a message of bytes with nothing queued before it (most messages): one
        sendmsg of the header and the parts as they are; what the socket does not take is
        queued."""
        count = len(parts)
        head = _HEADS.get(count) or _head(count)
        sizes = [len(part) for part in parts]
        self._send_bufs([head.pack(count, *sizes), *parts], head.size + sum(sizes))

    def _send_bufs(self, bufs: list[Any], total: int) -> None:
        """One sendmsg of whole messages' `bufs` (`total` bytes), nothing queued before them;
        what the socket does not take is queued."""
        self.queued += total
        try:
            sent = self.sock.sendmsg(bufs, (), socket.MSG_NOSIGNAL)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.broken = True  # as `write` does: the message is dropped with the link
            return
        self.written += sent
        if sent == total:
            return
        for buf in bufs:  # the rest waits, from the first byte not sent
            if sent >= len(buf):
                sent -= len(buf)
                continue
            self.backlog.append(memoryview(buf)[sent:])
            sent = 0

    def write(self) -> bool:
        """Writes backlog until the socket is full; True when the backlog is empty. A broken
        link drops its backlog. Caller holds the lock."""
        backlog = self.backlog
        while backlog:
            if self.broken:
                backlog.clear()
                return True
            bufs = list(backlog) if len(backlog) <= 64 else [backlog[i] for i in range(64)]
            try:
                sent = self.sock.sendmsg(bufs, (), socket.MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                self.broken = True
                continue
            self.written += sent
            while sent:
                head = backlog[0]
                if head.nbytes <= sent:
                    sent -= head.nbytes
                    backlog.popleft()
                else:
                    backlog[0] = head[sent:]
                    sent = 0
        return True

    def wait_writable(self, timeout: float) -> None:
        """Waits (without the lock) until the socket may take more, at most `timeout` s."""
        try:
            select.select([], [self.sock], [], timeout)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        self.sock.close()

