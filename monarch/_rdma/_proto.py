"""The data connection's protocol: the secret handshake, framed control messages, deadlines.

A connection starts with mutual proof of the job secret (HMAC-SHA256 over both sides' random
nonces); nothing else is read from an unproven peer, and nothing is ever unpickled. After it,
control messages are msgpack maps behind a 4-byte length; bulk bytes travel raw or through a
shared ring, as each path (`_pump`, `_cma`) defines.

    client -> server   MAGIC (8 bytes: name + version) + client nonce (16)
    server -> client   server nonce (16) + HMAC(secret, "server" + cn + sn)
    client -> server   HMAC(secret, "client" + cn + sn)
    server -> client   b"\\x01" (accepted), or the connection closes
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time
from typing import Any

import msgpack

from ._errors import RDMAError

MAGIC = b"MRDMA\x00\x00\x01"
NONCE_BYTES = 16
MAC_BYTES = 32
ACCEPTED = b"\x01"
MAX_MESSAGE_BYTES = 1 << 16
_LENGTH = struct.Struct("<I")


class ProtocolError(RDMAError):
    """The peer sent something this protocol does not allow."""


class Deadline:
    """The end of an operation's time budget (None: no end)."""

    __slots__ = ("end", "what")

    def __init__(self, timeout: float | None, what: str) -> None:
        self.end = None if timeout is None else time.monotonic() + timeout
        self.what = what

    def left(self) -> float | None:
        """Seconds left; raises TimeoutError once none are."""
        if self.end is None:
            return None
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.what} did not finish in time")
        return left

    def arm(self, sock: socket.socket) -> socket.socket:
        """Makes the socket's next blocking call end by this deadline."""
        sock.settimeout(self.left())
        return sock


def _mac(secret: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, role + client_nonce + server_nonce, hashlib.sha256).digest()


def client_handshake(sock: socket.socket, secret: bytes) -> None:
    """Proves the secret to a data server and checks its proof; raises RDMAError if refused."""
    client_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + client_nonce)
    reply = recv_exact(sock, NONCE_BYTES + MAC_BYTES)
    server_nonce, proof = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
    if not hmac.compare_digest(proof, _mac(secret, b"server", client_nonce, server_nonce)):
        raise RDMAError("the data server did not prove this job's secret (another job?)")
    sock.sendall(_mac(secret, b"client", client_nonce, server_nonce))
    if recv_exact(sock, 1) != ACCEPTED:
        raise RDMAError("the data server refused this process's credentials")


def server_handshake(sock: socket.socket, secret: bytes) -> str | None:
    """Checks a new peer; returns None if it proved the secret, else why it is refused."""
    hello = recv_exact(sock, len(MAGIC) + NONCE_BYTES)
    if hello[: len(MAGIC)] != MAGIC:
        return "garbage"
    client_nonce, server_nonce = hello[len(MAGIC):], os.urandom(NONCE_BYTES)
    sock.sendall(server_nonce + _mac(secret, b"server", client_nonce, server_nonce))
    proof = recv_exact(sock, MAC_BYTES)
    if not hmac.compare_digest(proof, _mac(secret, b"client", client_nonce, server_nonce)):
        return "unauthenticated"
    sock.sendall(ACCEPTED)
    return None


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Reads exactly n bytes; raises EOFError if the peer closes first."""
    data = bytearray(n)
    recv_into_exact(sock, memoryview(data))
    return bytes(data)


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    """Fills `view` from the socket; raises EOFError if the peer closes first."""
    got, total = 0, view.nbytes
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise EOFError("the peer closed the data connection")
        got += n


def send_msg(sock: socket.socket, message: dict[str, Any]) -> None:
    """Sends one control message."""
    data = msgpack.packb(message)
    sock.sendall(_LENGTH.pack(len(data)) + data)


def recv_msg(sock: socket.socket) -> dict[str, Any]:
    """Reads one control message; raises ProtocolError if it is not a msgpack map."""
    (size,) = _LENGTH.unpack(recv_exact(sock, _LENGTH.size))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"control message of {size} bytes is over the limit")
    try:
        message = msgpack.unpackb(recv_exact(sock, size))
    except (ValueError, msgpack.ExtraData) as exc:
        raise ProtocolError(f"undecodable control message: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a control message must be a map")
    return message
