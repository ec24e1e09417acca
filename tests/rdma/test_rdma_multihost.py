"""RDMABuffer across host workers (each on its own loopback address, as in test_multihost):
a proc's data server listens where its host is reached, and buffers move between hosts."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from rdma_kinds import content, digest

from monarch import _rdma
from monarch._runtime._rundir import run_root, sweep_dead
from monarch.actor import Actor, attach_to_workers, endpoint
from monarch.rdma import RDMABuffer

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20


class Peer(Actor):
    def __init__(self) -> None:
        self.data = bytearray(content(5 * MiB, 1))

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data)

    @endpoint
    def read(self, buffer: RDMABuffer, transport: str) -> tuple[str, str]:
        _rdma.configure(transport=transport)
        try:
            dst = bytearray(buffer.size())
            buffer.read_into(dst).get(timeout=60)
            return digest(dst), _rdma.choose_path(buffer._handle)
        finally:
            _rdma.reset()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture
def workers(monkeypatch: Any, fault_log: Any) -> Iterator[list[str]]:
    secret = secrets.token_hex(16)
    monkeypatch.setenv("MONARCH_WORKER_SECRET", secret)
    started, addresses = [], []
    for host in ("127.0.0.2", "127.0.0.3"):
        address = f"tcp://{host}:{_free_port(host)}"
        child = subprocess.Popen([sys.executable, "-m", "monarch._host.worker", "--address",
                                  address], stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, MONARCH_WORKER_SECRET=secret))
        assert "listening" in (child.stdout.readline() if child.stdout else "")
        started.append(child)
        addresses.append(address)
    yield addresses
    for child in started:
        if child.poll() is None:
            child.terminate()  # a worker ends through its cleanup on SIGTERM (its run dir)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=30)
            raise
    sweep_dead(run_root())  # what the next job would do for a SIGKILLed worker's directory


def test_buffers_move_between_hosts(workers: list[str]) -> None:
    procs = attach_to_workers(workers=workers).spawn_procs(per_host={"gpus": 1})
    try:
        peers = procs.spawn("rdma_peers", Peer)
        owner, reader = peers.slice(hosts=0), peers.slice(hosts=1)
        buffer = owner.buffer.call_one().get(timeout=60)
        assert buffer._handle.server.tcp_host == "127.0.0.2"  # where that host is reached
        want = digest(content(5 * MiB, 1))
        assert reader.read.call_one(buffer, "tcp").get(timeout=60) == (want, "tcp")
        assert reader.read.call_one(buffer, "auto").get(timeout=60) == (want, "cma")  # one box
        _rdma.configure(transport="tcp")
        try:
            dst = bytearray(5 * MiB)
            buffer.read_into(dst).get(timeout=60)  # the controller, from host 127.0.0.2
            assert digest(dst) == want
        finally:
            _rdma.reset()
        buffer.drop().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)
