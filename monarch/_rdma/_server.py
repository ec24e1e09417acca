"""The per-process data server: serves this process's buffers to authenticated peers.

Started on the first RDMABuffer a process makes. It listens on an abstract unix socket (same-host
peers; no file, so nothing is left behind even by a SIGKILL) and on TCP at the process's bind
address (other hosts, or any peer when forced), apart from the control sockets. A peer must prove the job secret first
(`_proto`); refusals are counted, never answered. Each connection gets a thread that serves
its requests one at a time:

    read/write {id, token, length, path}  path: cma (grant the address, peer copies, "done"),
                                          shm (through the connection's ring), tcp (stream)
    ring {slots, slot}  + the segment's fd (SCM_RIGHTS): maps the ring for shm transfers
    drop {id, token}
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._runtime._identity import ProcessIdentity
from ..telemetry import process_recorder
from . import _cma, _config, _pump, _segments
from ._errors import BufferDroppedError
from ._handle import ServerAddress
from ._memory import Memory
from ._proto import Deadline, ProtocolError, recv_msg, send_msg, server_handshake
from ._registry import Entry, Registry

fault_hook: Callable[[str], None] | None = None
"""Tests only: called with "granted" after a transfer is accepted and "chunk" after each chunk
the server moves, in the serving thread (a test kills its process there, mid-transfer)."""

MAX_RING_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True, slots=True)
class ServerStatistics:
    """A snapshot of a data server.

    Attributes:
        buffers: buffers registered and not dropped.
        pinned: transfers in progress on them.
        connections: authenticated connections open.
        refused: refused connections by reason (garbage, unauthenticated, incomplete).
    """

    buffers: int
    pinned: int
    connections: int
    refused: dict[str, int]


class _Reject(Exception):
    """A request the server answers with an error (the connection stays usable)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class DataServer:
    """Listeners, registry and connection threads of one process."""

    def __init__(self, identity: ProcessIdentity) -> None:
        self.identity = identity
        self.registry = Registry()
        self._lock = threading.Lock()
        self._refused: collections.Counter[str] = collections.Counter()
        self._connections = 0
        token = os.urandom(8)
        unix_name = f"\0monarch-rdma/{identity.job_id}/{os.getpid()}/{token.hex()}"
        self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._unix.bind(unix_name)
        self._unix.listen(64)
        self._tcp = socket.create_server((identity.bind_host, 0), backlog=64)
        self.address = ServerAddress(
            identity.name, os.getpid(), identity.hostname, boot_id(), netns(), unix_name,
            _advertised(identity), self._tcp.getsockname()[1], token)
        _cma.allow_readers()
        _segments.sweep_dead()
        for listener, transport in ((self._unix, "unix"), (self._tcp, "tcp")):
            threading.Thread(target=self._accept, args=(listener, transport), daemon=True,
                             name=f"monarch-rdma-{transport}").start()
        atexit.register(self.close)

    def close(self) -> None:
        """Stops listening (open transfers end with their peers)."""
        for listener in (self._unix, self._tcp):
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def statistics(self) -> ServerStatistics:
        """A snapshot of the server's counters."""
        with self._lock:
            return ServerStatistics(len(self.registry), self.registry.pinned(),
                                    self._connections, dict(self._refused))

    def _accept(self, listener: socket.socket, transport: str) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(sock, transport), daemon=True,
                             name="monarch-rdma-conn").start()

    def _serve(self, sock: socket.socket, transport: str) -> None:
        with sock:
            sock.settimeout(_config.HANDSHAKE_TIMEOUT_S)
            try:
                why = server_handshake(sock, self.identity.secret)
            except (OSError, EOFError):
                why = "incomplete"
            if why is not None:
                self._refuse(why)
                return
            if transport == "tcp":
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._connections += 1
            try:
                _Session(self, sock, transport).run()
            finally:
                with self._lock:
                    self._connections -= 1

    def _refuse(self, why: str) -> None:
        with self._lock:
            self._refused[why] += 1
        metrics = process_recorder().metrics
        metrics.declare(REFUSED_METRIC)
        metrics.inc((REFUSED_METRIC.name, why))


def _refused_metric() -> Any:
    from ..telemetry._metrics import MetricSpec  # the spec type is not public in telemetry

    return MetricSpec("rdma_refused_connections", "counter", ("reason",),
                      "Data-plane connections refused (garbage or unauthenticated)")


REFUSED_METRIC = _refused_metric()


class _Session:
    """One authenticated connection: its requests, its ring, its pending cma grant."""

    def __init__(self, server: DataServer, sock: socket.socket, transport: str) -> None:
        self.server = server
        self.sock = sock
        self.transport = transport
        self.ring: _pump.Ring | None = None
        # A cma grant whose peer has not said "done" yet: (entry, memory, op). Its pin keeps
        # the memory alive while the peer copies.
        self.pending: tuple[Entry, Memory, str] | None = None
        self.handlers = {"read": self.read, "write": self.write, "done": self.done,
                         "ring": self.setup_ring, "drop": self.drop}

    def run(self) -> None:
        try:
            while True:
                self.sock.settimeout(None)  # idle between requests for as long as the peer likes
                self._handle(recv_msg(self.sock))
        except (EOFError, OSError, ProtocolError):
            pass  # the peer left or broke the protocol: its connection ends
        except Exception as exc:  # noqa: BLE001 - a bug here must not look like a dead owner
            with contextlib.suppress(OSError):
                send_msg(self.sock, {"ok": False, "error": "internal",
                                     "message": f"the owner failed: {type(exc).__name__}: {exc}"})
        finally:
            self._release_pending()
            if self.ring is not None:
                self.ring.close()

    def _handle(self, message: dict[str, Any]) -> None:
        handler = self.handlers.get(message.get("op"))  # type: ignore[arg-type]
        if handler is None:
            raise ProtocolError(f"unknown op {message.get('op')!r}")
        try:
            handler(message)
        except _Reject as reject:
            send_msg(self.sock, {"ok": False, "error": reject.kind, "message": str(reject)})
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed {message.get('op')} request: {exc!r}") from None

    # -- requests ----------------------------------------------------------------------------
    def read(self, message: dict[str, Any]) -> None:
        path, nbytes = self._check_path(message)
        entry, memory = self._pin(message, nbytes, writing=False)
        try:
            memory.pull()
            if path == "cma":
                self._grant(entry, memory, "read")
                entry = None  # type: ignore[assignment]  # pinned until "done"
                return
            send_msg(self.sock, {"ok": True})
            _hook("granted")
            _pump.send(self.sock, self._carrier(path), memory, nbytes,
                       self._deadline(message), on_chunk=_chunk_hook())
        finally:
            if entry is not None:
                self.server.registry.unpin(entry)

    def write(self, message: dict[str, Any]) -> None:
        path, nbytes = self._check_path(message)
        entry, memory = self._pin(message, nbytes, writing=True)
        try:
            if path == "cma":
                self._grant(entry, memory, "write")
                entry = None  # type: ignore[assignment]  # pinned until "done"
                return
            send_msg(self.sock, {"ok": True})
            _hook("granted")
            _pump.receive(self.sock, self._carrier(path), memory, nbytes,
                          self._deadline(message), on_chunk=_chunk_hook())
            memory.push()
            send_msg(self.sock, {"ok": True})
        finally:
            if entry is not None:
                self.server.registry.unpin(entry)

    def done(self, message: dict[str, Any]) -> None:
        """The peer finished (or gave up) copying a cma grant."""
        if self.pending is None:
            raise ProtocolError("done without a transfer")
        entry, memory, op = self.pending
        self.pending = None
        try:
            if op == "write" and message.get("copied"):
                memory.push()
        finally:
            self.server.registry.unpin(entry)
        if message.get("reply"):
            send_msg(self.sock, {"ok": True})

    def setup_ring(self, message: dict[str, Any]) -> None:
        slots, slot = int(message["slots"]), int(message["slot"])
        if self.transport != "unix" or not (0 < slots * slot <= MAX_RING_BYTES):
            raise _Reject("ring", f"no ring of {slots} x {slot} bytes on {self.transport}")
        send_msg(self.sock, {"ok": True})
        self.sock.settimeout(_config.HANDSHAKE_TIMEOUT_S)
        _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
        if not fds:
            raise ProtocolError("ring setup without a segment")
        try:
            mapping, address = _segments.attach(fds[0], slots * slot)
        except (OSError, ValueError) as exc:
            raise _Reject("ring", f"cannot map the ring: {exc}") from None
        finally:
            for fd in fds:
                os.close(fd)
        if self.ring is not None:
            self.ring.close()
        self.ring = _pump.Ring(mapping, address, slots, slot)
        send_msg(self.sock, {"ok": True})

    def drop(self, message: dict[str, Any]) -> None:
        if bytes(message["token"]) == self.server.address.token:
            self.server.registry.drop(int(message["id"]))
        send_msg(self.sock, {"ok": True})

    # -- helpers -----------------------------------------------------------------------------
    def _check_path(self, message: dict[str, Any]) -> tuple[str, int]:
        path, nbytes = message["path"], int(message["length"])
        if self.pending is not None:
            raise ProtocolError("a new transfer before the last one's done")
        if path not in ("cma", "shm", "tcp") or (path != "tcp") != (self.transport == "unix"):
            raise _Reject("path", f"path {path!r} is not served on {self.transport}")
        if path == "shm" and self.ring is None:
            raise _Reject("path", "shm transfer before the ring was set up")
        return path, nbytes

    def _pin(self, message: dict[str, Any], nbytes: int, writing: bool) -> tuple[Entry, Memory]:
        buffer_id = int(message["id"])
        if bytes(message["token"]) != self.server.address.token:
            raise _Reject("dropped", f"RDMABuffer #{buffer_id} is unknown here (its owner "
                                     "restarted?)")
        try:
            entry, memory = self.server.registry.pin(buffer_id)
        except BufferDroppedError as exc:
            raise _Reject("dropped", str(exc)) from None
        problem = None
        if nbytes < 0 or nbytes > memory.nbytes:
            problem = _Reject("size", f"{nbytes} bytes asked of a {memory.nbytes}-byte buffer")
        elif writing and memory.readonly:
            problem = _Reject("readonly", f"RDMABuffer #{buffer_id} is read-only")
        if problem is not None:
            self.server.registry.unpin(entry)
            raise problem
        return entry, memory

    def _grant(self, entry: Entry, memory: Memory, op: str) -> None:
        self.pending = (entry, memory, op)
        send_msg(self.sock, {"ok": True, "address": memory.address})
        _hook("granted")

    def _carrier(self, path: str) -> _pump.Carrier:
        if path == "shm":
            assert self.ring is not None
            return self.ring
        return _pump.Stream(_config.TCP_CHUNK_BYTES, _config.TCP_WINDOW)

    def _deadline(self, message: dict[str, Any]) -> Deadline:
        """The initiator's deadline, and a little more: it gives up first, and says so."""
        timeout = float(message.get("timeout", _config.DEFAULT_TIMEOUT_S))
        return Deadline(timeout + _config.SERVE_GRACE_S, "serving a transfer")

    def _release_pending(self) -> None:
        if self.pending is not None:
            entry, _, _ = self.pending
            self.pending = None
            self.server.registry.unpin(entry)


def _hook(point: str) -> None:
    hook = fault_hook
    if hook is not None:
        hook(point)


def _chunk_hook() -> Callable[[int], None] | None:
    hook = fault_hook
    return None if hook is None else (lambda index: hook("chunk"))


def _advertised(identity: ProcessIdentity) -> str:
    """The address peers dial for the TCP listener (a wildcard bind is reached by name)."""
    if identity.bind_host in ("", "0.0.0.0", "::"):
        return identity.hostname
    return identity.bind_host


_boot_id: str | None = None


def boot_id() -> str:
    """This machine's boot id (the hostname where the kernel does not tell)."""
    global _boot_id
    if _boot_id is None:
        try:
            _boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            _boot_id = socket.gethostname()
    return _boot_id


def netns() -> int:
    """This process's network namespace (0 where the kernel does not tell)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return 0
