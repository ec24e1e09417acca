"""When things go wrong: owners killed mid-transfer, dead owners, strangers at the data
server, and what the job leaves in /dev/shm (nothing)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from rdma_kinds import content, make, raw
from waiting import wait_gone

from monarch import _rdma
from monarch._rdma import _proto, _server
from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import OwnerGoneError, RDMABuffer

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20
HERE = Path(__file__).resolve().parent


class Doomed(Actor):
    """Owns a big buffer and can be told to SIGKILL its own process in the middle of serving."""

    def __init__(self) -> None:
        self.data = make("tensor", 64 * MiB, seed=1)

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data)

    @endpoint
    def die_at(self, point: str, count: int) -> None:
        seen = [0]

        def hook(where: str) -> None:
            seen[0] += where == point
            if seen[0] >= count:
                os.kill(os.getpid(), signal.SIGKILL)

        _server.fault_hook = hook

    @endpoint
    def exit(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    @endpoint
    def statistics(self) -> dict[str, Any]:
        stats = _rdma.statistics()
        assert stats is not None
        return {"refused": stats.refused, "connections": stats.connections}


@pytest.fixture
def doomed(fault_log: Any) -> Any:
    """A fresh one-proc mesh (the tests kill it); failures go to the fault log."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    yield procs.spawn("doomed", Doomed)
    with contextlib.suppress(Exception):  # it was killed on purpose
        procs.stop().get(timeout=30)


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize("path", ["cma", "shm", "tcp"])
def test_owner_killed_mid_transfer(doomed: Any, path: str, op: str) -> None:
    """The owner dies while serving: the initiator gets OwnerGoneError at once, never a hang
    and never bytes from freed memory; later transfers fail the same way."""
    _rdma.configure(transport="auto" if path == "cma" else path)
    try:
        buffer = doomed.buffer.call_one().get(timeout=30)
        # cma: right after granting the address; else after the third chunk of 64
        point, count = ("granted", 1) if path == "cma" else ("chunk", 3)
        doomed.die_at.call_one(point, count).get(timeout=30)
        local = torch.zeros(64 * MiB, dtype=torch.uint8)
        # A hang would end in TimeoutError (the wait here, or the transfer's deadline); the
        # death must be the error, and it must be the owner's.
        future = buffer.read_into(local) if op == "read" else buffer.write_from(local)
        error = future.exception(timeout=30)
        if path == "cma" and error is None:
            # the grant was the last thing it did; the copy may have beaten its teardown,
            # and then the bytes are the owner's
            assert op == "write" or raw(local) == raw(make("tensor", 64 * MiB, seed=1))
        else:
            assert isinstance(error, OwnerGoneError), repr(error)
            assert "exited or was killed" in str(error) or "is gone" in str(error)
        with pytest.raises(OwnerGoneError, match="exited or was killed"):
            buffer.read_into(local).get(timeout=30)
        assert buffer.drop().get(timeout=30) is None  # nothing left to drop
    finally:
        _rdma.reset()


def test_owner_gone_before_the_read(doomed: Any, fault_log: Any) -> None:
    buffer = doomed.buffer.call_one().get(timeout=30)
    buffer.read_into(torch.empty(64 * MiB, dtype=torch.uint8)).get(timeout=30)  # pools a conn
    doomed.exit.broadcast()
    fault_log.wait_for(lambda f: "doomed" in str(f), timeout=30)
    for transport in ("auto", "tcp"):
        _rdma.configure(transport=transport)
        try:
            with pytest.raises(OwnerGoneError) as info:
                buffer.read_into(bytearray(64 * MiB)).get(timeout=30)
        finally:
            _rdma.reset()
        assert "doomed[0]" in str(info.value) and "exited or was killed" in str(info.value)


def _stranger(address: Any, transport: str, payload: bytes) -> bytes:
    """Connects to a data server, sends `payload`, returns what came back before it hung up."""
    if transport == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address.unix_name)
    else:
        sock = socket.create_connection((address.tcp_host, address.tcp_port))
    with sock:
        sock.settimeout(10)
        sock.sendall(payload)
        received = b""
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
        return received


def test_strangers_are_refused_and_counted(doomed: Any) -> None:
    buffer = doomed.buffer.call_one().get(timeout=30)
    address = buffer._handle.server
    garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert _stranger(address, "unix", garbage) == b""
    assert _stranger(address, "tcp", garbage) == b""
    # speaks the protocol but does not know the secret: gets the server's proof, then nothing
    reply = _stranger(address, "tcp", _proto.MAGIC + os.urandom(16) + b"\x00" * 32)
    assert len(reply) == _proto.NONCE_BYTES + _proto.MAC_BYTES
    stats = doomed.statistics.call_one().get(timeout=30)
    assert stats["refused"] == {"garbage": 2, "unauthenticated": 1}
    assert _refusals_in_store() == {"garbage": 2, "unauthenticated": 1}  # shipped as metrics
    dst = torch.empty(64 * MiB, dtype=torch.uint8)  # and it still serves the job
    buffer.read_into(dst).get(timeout=30)
    assert raw(dst[:64]) == content(64 * MiB, 1)[:64]


def _refusals_in_store() -> dict[str, float]:
    """The rdma_refused_connections series, once they reached the controller's store."""
    from monarch._controller._job import current_job

    job = current_job()
    assert job is not None

    def series(points: list[Any]) -> dict[str, float]:
        return {p.labels["reason"]: p.value for p in points
                if p.name == "rdma_refused_connections"}

    with job.store.subscribe(kinds=["metric"]) as feed:  # before looking: nothing is missed
        seen = series(job.store.metrics())
        while sum(seen.values()) < 3:
            seen.update(series(feed.wait(timeout=10)))
        return seen


def _run_job(mode: str, tmp_path: Path) -> tuple[str, list[int], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.run([sys.executable, str(HERE / "shm_job.py"), mode, str(tmp_path)],
                          env=env,
                          capture_output=True, text=True, timeout=100, check=False)
    lines = proc.stdout.splitlines()
    job = next(line.split()[1] for line in lines if line.startswith("job "))
    pids = [int(p) for p in next(line for line in lines if line.startswith("pids ")).split()[1:]]
    if mode == "normal":
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    return job, pids, proc.stdout


def test_no_dev_shm_leftovers_after_a_job(tmp_path: Path) -> None:
    """A job whose ring segments are named in /dev/shm, with an owner killed mid-transfer and
    a leftover planted as a crash would leave it: nothing of it remains after the job."""
    job, pids, out = _run_job("normal", tmp_path)
    assert "owner gone" in out
    wait_gone(*pids)
    assert _rdma.leftovers(job) == []
    assert not [p for p in Path("/dev/shm").iterdir() if job in p.name]


def test_no_dev_shm_leftovers_after_a_crash(tmp_path: Path) -> None:
    """The controller is SIGKILLed in the middle of a ring transfer; its procs follow it."""
    job, pids, out = _run_job("crash", tmp_path)
    assert "transfer running" in out
    wait_gone(*pids)
    assert not [p for p in Path("/dev/shm").iterdir() if job in p.name]
