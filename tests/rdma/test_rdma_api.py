"""The public surface of monarch.rdma, its import hygiene, async use, CUDA staging (faked)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from importing import what_importing_does
from rdma_kinds import content, digest, make, raw

import monarch.rdma
from monarch import _rdma
from monarch._rdma import _memory
from monarch.actor import Actor, endpoint
from monarch.rdma import RDMABuffer

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20


def test_public_names_are_frozen():
    assert sorted(monarch.rdma.__all__) == sorted([
        "RDMAAction", "RDMABuffer", "RDMAReadTransferWarning", "RDMATcpFallbackWarning",
        "RDMAWriteTransferWarning", "get_rdma_backend", "is_ibverbs_available",
        "is_rdma_available", "RDMAError", "OwnerGoneError", "BufferDroppedError"])
    with pytest.warns(DeprecationWarning):
        assert monarch.rdma.is_rdma_available()


def test_importing_starts_nothing():
    done = what_importing_does("monarch.rdma")
    assert (done.threads, done.sockets, done.environment) == ([], [], [])
    assert "torch" not in done.loaded


class AsyncReader(Actor):
    """An async actor: transfers are awaited on its loop."""

    @endpoint
    async def read(self, buffer: RDMABuffer) -> str:
        dst = bytearray(buffer.size())
        await buffer.read_into(dst)
        return digest(dst)

    @endpoint
    async def write(self, buffer: RDMABuffer, seed: int) -> None:
        await buffer.write_from(bytearray(content(buffer.size(), seed)))


def test_async_actors_await_transfers(procs: Any) -> None:
    data = bytearray(content(3 * MiB, 1))
    buffer = RDMABuffer(data)
    readers = procs.spawn("rdma_async", AsyncReader)
    assert set(readers.read.call(buffer).get(timeout=60).values()) == {digest(data)}
    readers.slice(gpus=0).write.call_one(buffer, seed=2).get(timeout=60)
    assert data == content(3 * MiB, 2)
    buffer.drop().get(timeout=30)


class StagedOwner(Actor):
    """Owns a tensor it pretends is on a CUDA device, so transfers stage it through host
    memory (this machine has no GPU)."""

    def __init__(self) -> None:
        self.device = make("tensor", MiB, seed=3)
        _memory.is_cuda = lambda obj: obj is self.device  # type: ignore[assignment]

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.device)

    @endpoint
    def change(self, seed: int) -> None:
        self.device.copy_(make("tensor", MiB, seed=seed))  # on the "device" only

    @endpoint
    def digest(self) -> str:
        return digest(self.device)


@pytest.mark.parametrize("transport", ["auto", "shm", "tcp"])
def test_cuda_owner_is_staged_through_host_memory(procs: Any, transport: str) -> None:
    """Reads see the device's bytes as they are when the read starts; writes reach the
    device, whatever the path."""
    owner = procs.slice(gpus=3).spawn(f"rdma_staged_{transport}", StagedOwner)
    buffer = owner.buffer.call_one().get(timeout=30)
    _rdma.configure(transport=transport)
    try:
        owner.change.call_one(4).get(timeout=30)  # after the buffer was made
        dst = torch.empty(MiB, dtype=torch.uint8)
        buffer.read_into(dst).get(timeout=30)
        assert raw(dst) == content(MiB, 4)
        src = make("numpy", MiB, seed=5)
        buffer.write_from(src).get(timeout=30)
        assert owner.digest.call_one().get(timeout=30) == digest(src)
    finally:
        _rdma.reset()


class Plain(Actor):
    def __init__(self) -> None:
        self.data = bytearray(content(MiB, 6))

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data)

    @endpoint
    def digest(self) -> str:
        return digest(self.data)


def test_cuda_destination_and_source_are_staged(procs: Any, monkeypatch: Any) -> None:
    owner = procs.slice(gpus=2).spawn("rdma_plain", Plain)
    buffer = owner.buffer.call_one().get(timeout=30)
    device = torch.zeros(MiB // 4, dtype=torch.float32)
    monkeypatch.setattr(_memory, "is_cuda", lambda obj: obj is device)
    buffer.read_into(device).get(timeout=30)
    assert raw(device) == content(MiB, 6)
    device.copy_(make("tensor", MiB, seed=7))
    buffer.write_from(device).get(timeout=30)
    assert owner.digest.call_one().get(timeout=30) == digest(device)
    buffer.drop().get(timeout=30)
