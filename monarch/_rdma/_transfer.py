"""Transfers as their initiator sees them: check the memory, pick a path, run it on a worker
thread, settle the future, record it as telemetry.

Paths, in the order `auto` tries them: ``local`` (the owner is this process: one memmove),
``cma`` (same host: process_vm_readv/writev, one copy, the owner's threads not involved),
``shm`` (same host: the connection's shared ring, both sides copying at once), ``tcp`` (the
chunked, flow-controlled stream; across hosts, or everywhere when forced).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .._runtime._future import Future
from .._runtime._identity import current_process
from ..telemetry import current_actor_tags, record_transfer
from . import _client, _cma, _config
from ._errors import BufferDroppedError, OwnerGoneError
from ._handle import BufferHandle
from ._memory import Memory, as_memory, memmove
from ._proto import Deadline
from ._server import DataServer, ServerStatistics, boot_id, netns
from ._threads import Workers


class TransferFuture(Future[Any]):
    """A transfer's future, settled by whichever thread runs the transfer: a worker, or the
    first thread that waits for it before a worker took it (it would only idle otherwise;
    it does so only when its wait may last as long as the transfer's own deadline). Waiters
    block on the future alone: a transfer thread cannot wake one that leads the process's
    inbox loop meanwhile."""

    __slots__ = ("_job", "_job_timeout")

    def __init__(self) -> None:  # pylint: disable=super-init-not-called (Future refuses it)
        self._init()
        self._job: list[Callable[[], None]] = []  # the transfer until someone takes it
        self._job_timeout = 0.0

    def start(self, job: Callable[[], None], timeout: float, workers: Workers) -> None:
        """Hands `job` (which settles this future) to the workers."""
        self._job.append(job)
        self._job_timeout = timeout
        workers.submit(self.run_pending)

    def run_pending(self) -> None:
        """Runs the transfer in this thread unless another thread took it already."""
        try:
            job = self._job.pop()  # atomic: exactly one taker
        except IndexError:
            return
        job()

    def _wait(self, timeout: float | None) -> bool:
        if timeout is None or timeout >= self._job_timeout:
            self.run_pending()
        return self._lock_wait(timeout)


class _State:
    """This process's data plane: its server (once it owns a buffer), connections, workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: DataServer | None = None
        self.pool = _client.Pool()
        self.workers = Workers()


_state: _State | None = None
_state_lock = threading.Lock()


def state() -> _State:
    global _state
    with _state_lock:
        if _state is None:
            _state = _State()
            os.register_at_fork(after_in_child=_forget_after_fork)
        return _state


def _forget_after_fork() -> None:
    global _state
    _state = None  # the child has none of the parent's threads, and owns none of its buffers


def server() -> DataServer:
    """This process's data server, started on first use (and again for a new job: a script
    may end its job and start another, with another secret and run directory)."""
    st = state()
    identity = current_process()
    with st.lock:
        if st.server is not None and st.server.identity is not identity:
            st.server.close()
            st.server = None
        if st.server is None:
            st.server = DataServer(identity)
        return st.server


def statistics() -> ServerStatistics | None:
    """The data server's counters, or None if this process never owned a buffer."""
    srv = state().server
    return None if srv is None else srv.statistics()


# -- the operations ---------------------------------------------------------------------------

def register(data: Any, owner_actor: str) -> BufferHandle:
    """Registers `data` with this process's server; returns the handle that travels."""
    memory = as_memory(data, "RDMABuffer data")
    if memory.nbytes == 0:
        raise ValueError("Cannot create RDMABuffer with size 0.")
    srv = server()
    buffer_id = srv.registry.add(memory)
    return BufferHandle(srv.address, buffer_id, memory.nbytes, memory.readonly, memory.device,
                        owner_actor)


def read_into(handle: BufferHandle, dst: Any, timeout: float) -> Future[None]:
    """Starts reading the whole buffer into the start of `dst`."""
    return _start(handle, check_read(handle, dst), handle.size, "read", timeout)


def write_from(handle: BufferHandle, src: Any, timeout: float) -> Future[None]:
    """Starts writing all of `src` to the start of the buffer."""
    memory = check_write(handle, src)
    return _start(handle, memory, memory.nbytes, "write", timeout)


def check_read(handle: BufferHandle, dst: Any) -> Memory:
    """`dst`'s memory, if the whole buffer can be read into it (else ValueError)."""
    memory = as_memory(dst, "dst")
    if memory.readonly:
        raise ValueError(f"dst is read-only ({type(dst).__name__}); read into writable memory")
    if memory.nbytes < handle.size:
        raise ValueError(f"destination local memory size ({memory.nbytes}) must be >= remote "
                         f"buffer size ({handle.size}) of {handle.describe()}")
    return memory


def check_write(handle: BufferHandle, src: Any) -> Memory:
    """`src`'s memory, if all of it can be written to the buffer (else ValueError)."""
    memory = as_memory(src, "src")
    if memory.nbytes > handle.size:
        raise ValueError(f"source local memory size ({memory.nbytes}) must be <= remote "
                         f"buffer size ({handle.size}) of {handle.describe()}")
    if handle.readonly:
        raise ValueError(f"{handle.describe()} is read-only: it was made over immutable memory")
    return memory


def drop(handle: BufferHandle) -> Future[None]:
    """Releases the buffer at its owner. Settles with None, also when the owner is gone."""
    future = TransferFuture()
    srv = state().server
    if srv is not None and srv.address.token == handle.server.token:
        srv.registry.drop(handle.buffer_id)
        future.set_result(None)
        return future
    future.start(lambda: _settle(future, _remote_drop, handle), _config.DEFAULT_TIMEOUT_S,
                 state().workers)
    return future


def _start(handle: BufferHandle, memory: Memory, nbytes: int, op: str,
           timeout: float) -> Future[None]:
    mesh = current_actor_tags().get("mesh")
    future = TransferFuture()
    future.start(lambda: _settle(future, _run, handle, memory, nbytes, op, timeout, mesh),
                 timeout, state().workers)
    return future


def _settle(future: Future[Any], fn: Any, *args: Any) -> None:
    try:
        value = fn(*args)
    except BaseException as exc:  # noqa: BLE001 - delivered through the future
        future.set_exception(exc)
    else:
        future.set_result(value)


def _run(handle: BufferHandle, memory: Memory, nbytes: int, op: str, timeout: float,
         mesh: str | None) -> None:
    what = f"RDMABuffer {op} of {nbytes} bytes with {handle.describe()}"
    deadline = Deadline(timeout, what)
    start = time.perf_counter()
    if op == "write":
        memory.pull()  # a CUDA source: to host memory first
    try:
        path = _move(handle, memory, nbytes, op, deadline)
    except TimeoutError:
        raise TimeoutError(f"{what} did not finish within {timeout} s") from None
    if op == "read":
        memory.push()  # a CUDA destination: from host memory
    seconds = time.perf_counter() - start
    me, owner = current_process().name, handle.server.owner
    src, dst = (owner, me) if op == "read" else (me, owner)
    staged = memory.device != "cpu" or handle.device != "cpu"
    record_transfer(nbytes, seconds, src, dst, f"{path}+cuda-staged" if staged else path, mesh)


def choose_path(handle: BufferHandle) -> str:
    """The path a transfer with this buffer takes from here (see the module docstring)."""
    knob = _config.transport()
    if knob == "tcp":
        return "tcp"
    srv = state().server
    if srv is not None and srv.address.token == handle.server.token:
        return "local"
    if handle.server.boot_id == boot_id() and handle.server.netns == netns():
        return "shm" if knob == "shm" or not _cma.usable() else "cma"
    return "tcp"


def _move(handle: BufferHandle, memory: Memory, nbytes: int, op: str,
          deadline: Deadline) -> str:
    path = choose_path(handle)
    if path == "local":
        _local(handle, memory, nbytes, op)
        return path
    identity, pool = current_process(), state().pool
    transport = "tcp" if path == "tcp" else "unix"
    for attempt in range(2):
        conn, reused = _take(pool, handle, transport, identity.secret, deadline)
        if path == "cma" and (conn.peer_pid != handle.server.pid or not _cma.usable()):
            path = "shm"  # the owner's pid is not ours to attach to (another pid namespace)
        try:
            taken = _client.transfer(conn, handle, memory, nbytes, op, path, deadline,
                                     identity.job_id)
        except _client.CLEAN_FAILURES:
            pool.give(conn)
            raise
        except (EOFError, ConnectionError) as exc:
            conn.close()
            pool.forget(handle.server)
            if reused and attempt == 0:
                continue  # a pooled connection the owner closed: one fresh try tells
            raise _gone(handle, op, exc) from None
        except BaseException:
            conn.close()
            raise
        pool.give(conn)
        return taken
    raise AssertionError("unreachable")


def _take(pool: _client.Pool, handle: BufferHandle, transport: str, secret: bytes,
          deadline: Deadline) -> tuple[_client.Conn, bool]:
    try:
        return pool.take(handle.server, transport, secret, deadline)
    except OwnerGoneError as exc:
        raise OwnerGoneError(f"{handle.describe()}: {exc}") from None


def _gone(handle: BufferHandle, op: str, exc: BaseException) -> OwnerGoneError:
    return OwnerGoneError(f"{handle.describe()}: the owner closed the data connection during "
                          f"the {op} ({exc}); it exited or was killed")


def _local(handle: BufferHandle, memory: Memory, nbytes: int, op: str) -> None:
    registry = server().registry
    try:
        entry, owned = registry.pin(handle.buffer_id)
    except BufferDroppedError as exc:
        raise BufferDroppedError(f"{handle.describe()}: {exc}") from None
    try:
        if op == "read":
            owned.pull()
            memmove(memory.address, owned.address, nbytes)
        else:
            memmove(owned.address, memory.address, nbytes)
            owned.push()
    finally:
        registry.unpin(entry)


def _remote_drop(handle: BufferHandle) -> None:
    deadline = Deadline(_config.DEFAULT_TIMEOUT_S, f"dropping {handle.describe()}")
    path = choose_path(handle)
    pool, secret = state().pool, current_process().secret
    try:
        conn, _ = pool.take(handle.server, "tcp" if path == "tcp" else "unix", secret, deadline)
    except OwnerGoneError:
        return  # its owner is gone, and the buffer with it
    try:
        _client.drop(conn, handle, deadline)
    except (EOFError, ConnectionError):
        conn.close()
        return
    except BaseException:
        conn.close()
        raise
    pool.give(conn)
