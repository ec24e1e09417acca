"""RDMABuffer between real processes: round trips of every kind over every path, the
controller as owner and reader, concurrent readers, wrong sizes, drops, telemetry, actions."""

from __future__ import annotations

import ctypes
import errno
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from rdma_kinds import KINDS, WRITABLE, content, digest, make, raw

from monarch import _rdma
from monarch.actor import Actor, ActorError, endpoint
from monarch.rdma import (
    BufferDroppedError,
    RDMAAction,
    RDMABuffer,
    get_rdma_backend,
    is_ibverbs_available,
)

pytestmark = pytest.mark.timeout(120)

PATHS = ("auto", "shm", "tcp")
MiB = 1 << 20


class Owner(Actor):
    """Owns buffers, reports what they hold, and reads buffers of others."""

    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}

    @endpoint
    def make(self, kind: str, nbytes: int, seed: int) -> RDMABuffer:
        obj = make(kind, nbytes, seed)
        buffer = RDMABuffer(obj)
        self.objects[buffer._handle.buffer_id] = obj
        return buffer

    @endpoint
    def digest(self, buffer: RDMABuffer) -> str:
        return digest(self.objects[buffer._handle.buffer_id])

    @endpoint
    def configure(self, transport: str) -> None:
        _rdma.reset()
        _rdma.configure(transport=transport)

    @endpoint
    def read(self, buffer: RDMABuffer, times: int = 1) -> list[str]:
        dst = torch.empty(buffer.size(), dtype=torch.uint8)
        out = []
        for _ in range(times):
            dst.zero_()
            buffer.read_into(dst).get(timeout=60)
            out.append(hashlib.sha256(dst.numpy().tobytes()).hexdigest())
        return out

    @endpoint
    def write(self, buffer: RDMABuffer, seed: int) -> None:
        buffer.write_from(bytearray(content(buffer.size(), seed))).get(timeout=60)

    @endpoint
    def drop(self, buffer: RDMABuffer) -> None:
        buffer.drop().get(timeout=60)


@pytest.fixture(scope="module")
def owners(procs: Any) -> Any:
    return procs.spawn("rdma_owners", Owner)


@pytest.fixture(params=PATHS)
def path(request: Any, owners: Any) -> Iterator[str]:
    """The transport knob, in the controller and every owner proc."""
    _rdma.configure(transport=request.param)
    owners.configure.call(request.param).get(timeout=30)
    yield request.param
    _rdma.reset()
    owners.configure.call("auto").get(timeout=30)


def expected_path(path: str) -> str:
    return {"auto": "cma", "shm": "shm", "tcp": "tcp"}[path]


def test_backend_names():
    assert get_rdma_backend() == "tcp" and not is_ibverbs_available()


def test_without_the_software_data_plane_no_buffer_is_made(owners: Any) -> None:
    """rdma_allow_tcp_fallback=False: no ibverbs and no fallback, so no RDMABuffer (as
    Monarch's 'none' backend), here and in procs spawned under it."""
    from monarch.actor import this_host
    from monarch.config import configured
    from monarch.rdma import RDMABuffer

    with configured(rdma_allow_tcp_fallback=False, rdma_disable_ibverbs=True):
        assert get_rdma_backend() == "none"
        with pytest.raises(RuntimeError, match="rdma_allow_tcp_fallback=False"):
            RDMABuffer(bytearray(16))
        procs = this_host().spawn_procs()
    with pytest.raises(ActorError, match="rdma_allow_tcp_fallback=False"):
        procs.spawn("owner_off", Owner).make.call_one("bytearray", 16, seed=1).get(timeout=60)
    assert get_rdma_backend() == "tcp"
    procs.stop().get(timeout=30)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_every_kind(owners: Any, path: str, kind: str) -> None:
    """The controller reads an owner's buffer of `kind` into every writable kind, then writes
    new bytes into it (a read-only buffer refuses)."""
    nbytes = 64 * 1024 + 4
    owner = owners.slice(gpus=0)
    buffer = owner.make.call_one(kind, nbytes, seed=1).get(timeout=30)
    assert buffer.size() == nbytes and _rdma.choose_path(buffer._handle) == expected_path(path)
    for dst_kind in WRITABLE:
        dst = make(dst_kind, nbytes, seed=99)
        assert buffer.read_into(dst).get(timeout=30) is None
        assert raw(dst) == content(nbytes, 1), dst_kind
    src = make("numpy", nbytes, seed=2)
    if kind == "bytes":
        with pytest.raises(ValueError, match="read-only"):
            buffer.write_from(src)
    else:
        buffer.write_from(src).get(timeout=30)
        assert owner.digest.call_one(buffer).get(timeout=30) == digest(src)
    buffer.drop().get(timeout=30)


def test_large_round_trip(owners: Any, path: str) -> None:
    nbytes = 40 * MiB + 12  # many chunks, a ragged last one
    owner = owners.slice(gpus=1)
    buffer = owner.make.call_one("tensor", nbytes, seed=3).get(timeout=30)
    dst = torch.empty(nbytes + 100, dtype=torch.uint8)  # larger is fine: the start is written
    dst[nbytes:] = 7
    buffer.read_into(dst).get(timeout=60)
    assert raw(dst[:nbytes]) == content(nbytes, 3) and dst[nbytes:].eq(7).all()
    src = make("bytearray", nbytes - 4, seed=4)  # smaller is fine: writes the start
    buffer.write_from(src).get(timeout=60)
    expected = make("tensor", nbytes, seed=3)
    expected.view(torch.uint8)[: nbytes - 4] = torch.frombuffer(src, dtype=torch.uint8)
    assert owner.digest.call_one(buffer).get(timeout=30) == digest(expected)
    buffer.drop().get(timeout=30)


def test_controller_owns_and_procs_read_and_write(owners: Any, path: str) -> None:
    data = make("tensor", 3 * MiB, seed=5)
    buffer = RDMABuffer(data)
    assert buffer.owner == "root"
    digests = owners.read.call(buffer).get(timeout=60)
    assert {d[0] for d in digests.values()} == {digest(data)}
    owners.slice(gpus=2).write.call_one(buffer, seed=6).get(timeout=60)
    assert raw(data) == content(3 * MiB, 6)
    buffer.drop().get(timeout=30)


def test_proc_to_proc(owners: Any, path: str) -> None:
    buffer = owners.slice(gpus=0).make.call_one("numpy", 2 * MiB, seed=7).get(timeout=30)
    digests = owners.slice(gpus=slice(1, 4)).read.call(buffer).get(timeout=60)
    assert [d for (d,) in digests.values()] == [hashlib.sha256(content(2 * MiB, 7)).hexdigest()] * 3
    owners.slice(gpus=3).drop.call_one(buffer).get(timeout=30)  # anyone may drop it
    with pytest.raises(BufferDroppedError):
        buffer.read_into(bytearray(2 * MiB)).get(timeout=30)


def test_own_buffer_in_process():
    data = bytearray(content(1000, 8))
    buffer = RDMABuffer(data)
    assert _rdma.choose_path(buffer._handle) == "local"
    dst = bytearray(1000)
    buffer.read_into(dst).get(timeout=10)
    assert dst == data
    buffer.write_from(b"\x00" * 10).get(timeout=10)
    assert data[:10] == bytes(10) and data[10:] == content(1000, 8)[10:]
    buffer.drop().get(timeout=10)


def test_concurrent_readers(owners: Any, path: str) -> None:
    """Three procs read one buffer three times each while the controller reads it four times
    at once: every read sees the whole buffer."""
    nbytes = 8 * MiB
    buffer = owners.slice(gpus=0).make.call_one("tensor", nbytes, seed=9).get(timeout=30)
    remote = owners.slice(gpus=slice(1, 4)).read.call(buffer, times=3)
    dsts = [torch.empty(nbytes, dtype=torch.uint8) for _ in range(4)]
    local = [buffer.read_into(dst) for dst in dsts]
    for future in local:
        future.get(timeout=60)
    want = hashlib.sha256(content(nbytes, 9)).hexdigest()
    assert all(digest(dst) == want for dst in dsts)
    assert all(d == [want] * 3 for d in remote.get(timeout=60).values())
    buffer.drop().get(timeout=30)


def test_wrong_sizes_and_shapes(owners: Any) -> None:
    buffer = owners.slice(gpus=0).make.call_one("tensor", 1024, seed=10).get(timeout=30)
    with pytest.raises(ValueError, match=r"destination local memory size \(1020\) must be >= "
                                         r"remote buffer size \(1024\)"):
        buffer.read_into(bytearray(1020))
    with pytest.raises(ValueError, match=r"source local memory size \(1028\) must be <= "
                                         r"remote buffer size \(1024\)"):
        buffer.write_from(bytearray(1028))
    with pytest.raises(ValueError, match="contiguous"):
        buffer.read_into(torch.empty(2048, dtype=torch.uint8)[::2])
    with pytest.raises(ValueError, match="read-only"):
        buffer.read_into(bytes(1024))
    with pytest.raises(ValueError, match="size 0"):
        RDMABuffer(torch.empty(0))
    with pytest.raises(ActorError) as info:
        owners.slice(gpus=0).make.call_one("tensor", 0, seed=0).get(timeout=30)
    assert isinstance(info.value.exception, ValueError)
    buffer.drop().get(timeout=30)


def test_drop_then_read(owners: Any, path: str) -> None:
    owner = owners.slice(gpus=1)
    buffer = owner.make.call_one("bytearray", 4096, seed=11).get(timeout=30)
    buffer.read_into(bytearray(4096)).get(timeout=30)
    assert buffer.drop().get(timeout=30) is None
    assert buffer.drop().get(timeout=30) is None  # twice is fine
    with pytest.raises(BufferDroppedError, match=r"RDMABuffer #\d+ \(4096 bytes\) of "
                                                  r"rdma_owners\[1\].*was dropped"):
        buffer.read_into(bytearray(4096)).get(timeout=30)
    with pytest.raises(BufferDroppedError):
        buffer.write_from(bytearray(4096)).get(timeout=30)
    with pytest.raises(ActorError, match="was dropped"):
        owners.slice(gpus=2).read.call_one(buffer).get(timeout=30)


def test_transfers_are_recorded(owners: Any) -> None:
    """Each transfer is a TransferRecord (bytes, seconds, source, destination, path) and
    bumps the transfer metrics, in the controller's store, whoever started it."""
    from monarch._controller._job import current_job

    job = current_job()
    assert job is not None
    with job.store.subscribe(kinds=["transfer", "metric"]) as feed:
        buffer = owners.slice(gpus=0).make.call_one("tensor", MiB, seed=12).get(timeout=30)
        buffer.read_into(torch.empty(MiB, dtype=torch.uint8)).get(timeout=30)
        owners.slice(gpus=1).write.call_one(buffer, seed=13).get(timeout=30)
        transfers: list[Any] = []
        metrics: set[tuple[str, str]] = set()
        while len(transfers) < 2 or ("transfer_bytes", "cma") not in metrics:
            for record in feed.wait(timeout=10):
                if getattr(record, "nbytes", None) == MiB:
                    transfers.append(record)
                elif hasattr(record, "labels") and record.name.startswith("transfer"):
                    metrics.add((record.name, record.labels.get("kind")))
    owner = buffer._handle.server.owner
    read = next(r for r in transfers if r.dst == "controller")
    assert (read.src, read.kind, read.seconds > 0) == (owner, "cma", True)
    write = next(r for r in transfers if r.dst == owner)
    assert write.src.startswith("procs-") and write.mesh == "rdma_owners"
    links = job.store.transfers(window=60).links
    assert links[(owner, "controller")].nbytes >= MiB
    assert ("transfers", "cma") in metrics or any(
        p.name == "transfers" for p in job.store.metrics())
    buffer.drop().get(timeout=30)


def test_prometheus_shows_transfer_bytes(owners: Any) -> None:
    from monarch.telemetry import StoreCollector
    from prometheus_client import CollectorRegistry, generate_latest

    from monarch._controller._job import current_job

    job = current_job()
    assert job is not None
    with job.store.subscribe(kinds=["metric"]) as feed:
        buffer = RDMABuffer(bytearray(MiB))
        owners.slice(gpus=0).read.call_one(buffer).get(timeout=30)  # a proc's transfer
        # the controller moved nothing meanwhile: this series is the proc's, shipped
        while not any(p.name == "transfer_bytes" for p in feed.wait(timeout=10)):
            pass
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(job.store))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'monarch_transfer_bytes_total{kind="cma"}' in text
    buffer.drop().get(timeout=30)


class _RefusingLibc:
    """A libc whose cross-memory attach says EPERM, as under Yama or without ptrace rights."""

    def _refuse(self, *args: Any) -> int:
        ctypes.set_errno(errno.EPERM)
        return -1

    process_vm_readv = process_vm_writev = _refuse


def test_cma_refused_falls_back_to_the_ring(owners: Any, monkeypatch: Any) -> None:
    from monarch._rdma import _cma

    monkeypatch.setattr(_cma, "_libc", _RefusingLibc())
    monkeypatch.setattr(_cma, "_refused", False)
    buffer = owners.slice(gpus=0).make.call_one("tensor", 3 * MiB, seed=17).get(timeout=30)
    assert _rdma.choose_path(buffer._handle) == "cma"
    dst = bytearray(3 * MiB)
    buffer.read_into(dst).get(timeout=30)
    assert dst == content(3 * MiB, 17)
    assert not _cma.usable() and _rdma.choose_path(buffer._handle) == "shm"
    buffer.write_from(make("bytearray", 3 * MiB, seed=18)).get(timeout=30)
    assert owners.slice(gpus=0).digest.call_one(buffer).get(timeout=30) == digest(
        make("bytearray", 3 * MiB, seed=18))
    buffer.drop().get(timeout=30)


def test_action_batches_reads_and_writes(owners: Any) -> None:
    a = owners.slice(gpus=0).make.call_one("tensor", 4096, seed=14).get(timeout=30)
    b = owners.slice(gpus=1).make.call_one("tensor", 4096, seed=15).get(timeout=30)
    dst_a, dst_b = bytearray(4096), bytearray(4096)
    new = make("bytearray", 4096, seed=16)
    RDMAAction().read_remote(dst_a, a).read_remote(dst_b, b).write_remote(a, new).submit(
        timeout=30).get(timeout=60)
    assert dst_b == content(4096, 15)
    assert owners.slice(gpus=0).digest.call_one(a).get(timeout=30) == digest(new)
    shared = bytearray(8192)
    with pytest.raises(ValueError, match="overlapping local memory"):
        RDMAAction().read_remote(memoryview(shared)[:4096], a).read_remote(
            memoryview(shared)[2048:6144], b).submit()
    with pytest.raises(NotImplementedError):
        RDMAAction().fetch_add(a, bytearray(8), 1)
    with pytest.raises(ValueError, match=r"source local memory size \(4128\) must be <="):
        RDMAAction().write_remote(a, bytearray(4096 + 32))  # refused when queued
    with pytest.raises(ValueError, match=r"destination local memory size \(16\) must be >="):
        RDMAAction().read_remote(bytearray(16), b)
    a.drop().get(timeout=30)
    b.drop().get(timeout=30)
