"""Data-plane pieces without processes: memory views, registry, protocol, pumps, segments."""

from __future__ import annotations

import array
import os
import socket
import threading

import numpy as np
import pytest
import torch

from monarch._rdma import _config, _memory, _proto, _pump, _segments
from monarch._rdma._errors import BufferDroppedError, RDMAError
from monarch._rdma._registry import Registry

pytestmark = pytest.mark.timeout(60)

SECRET = b"s" * 32


# -- memory ---------------------------------------------------------------------------------

@pytest.mark.parametrize("obj, nbytes, readonly", [
    (torch.arange(10, dtype=torch.float32), 40, False),
    (torch.zeros(3, 4, dtype=torch.bfloat16), 24, False),
    (torch.arange(20, dtype=torch.int64)[5:10], 40, False),
    (np.arange(6, dtype=np.float64).reshape(2, 3), 48, False),
    (bytearray(b"hello"), 5, False),
    (memoryview(bytearray(b"abcdef"))[1:4], 3, False),
    (b"immutable", 9, True),
    (array.array("i", [1, 2, 3]), 12, False),
])
def test_memory_views_every_kind(obj, nbytes, readonly):
    memory = _memory.as_memory(obj)
    assert memory.nbytes == nbytes and memory.readonly == readonly
    assert memory.view.format == "B" and memory.view.ndim == 1
    # the address really is where the bytes are
    assert bytes(memory.view) == bytes(_memory._view_at(memory.address, nbytes))


def test_memory_tensor_view_offsets_share_storage():
    base = torch.zeros(8, dtype=torch.uint8)
    memory = _memory.as_memory(base[2:6])
    memory.view[:] = b"\x01\x02\x03\x04"
    assert base.tolist() == [0, 0, 1, 2, 3, 4, 0, 0]


@pytest.mark.parametrize("obj", [
    torch.arange(10)[::2], np.arange(10)[::2], memoryview(bytearray(10))[::2],
    torch.zeros(4, 4).t(),
])
def test_memory_rejects_non_contiguous(obj):
    with pytest.raises(ValueError, match="contiguous"):
        _memory.as_memory(obj, "dst")


def test_memory_rejects_non_buffers():
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        _memory.as_memory(object())


def test_cuda_staging_through_host_memory(monkeypatch):
    """A CUDA tensor is seen through a host staging copy: pull refreshes it from the device,
    push copies it back. Faked here with a CPU tensor taken for a device one."""
    monkeypatch.setattr(_memory, "is_cuda", lambda obj: True)
    device = torch.arange(4, dtype=torch.float32)
    memory = _memory.as_memory(device)
    assert memory.staging is not None and memory.address != device.data_ptr()
    memory.pull()
    assert bytes(memory.view) == device.numpy().tobytes()
    memory.view[:] = torch.full((4,), 7.0).numpy().tobytes()
    assert device.tolist() == [0, 1, 2, 3]  # nothing reaches the device before push
    memory.push()
    assert device.tolist() == [7.0] * 4


# -- registry -------------------------------------------------------------------------------

def test_registry_drop_waits_for_pins():
    registry = Registry()
    buffer_id = registry.add(_memory.as_memory(bytearray(4)))
    entry, memory = registry.pin(buffer_id)
    assert registry.drop(buffer_id) and not registry.drop(buffer_id)
    assert entry.memory is memory  # still pinned: the memory stays
    with pytest.raises(BufferDroppedError, match="was dropped"):
        registry.pin(buffer_id)
    registry.unpin(entry)
    assert entry.memory is None and len(registry) == 0
    with pytest.raises(BufferDroppedError, match="is unknown"):
        registry.pin(99)


# -- protocol -------------------------------------------------------------------------------

def _handshake(client_secret: bytes, send: bytes | None = None) -> tuple[object, object]:
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    out: dict[str, object] = {}

    def serve() -> None:
        try:
            out["server"] = _proto.server_handshake(b, SECRET)
        except EOFError as exc:
            out["server"] = exc
        b.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        if send is not None:
            a.sendall(send)
            out["client"] = a.recv(100)
        else:
            _proto.client_handshake(a, client_secret)
            out["client"] = "ok"
    except Exception as exc:  # noqa: BLE001 - what the test looks at
        out["client"] = exc
    a.close()
    thread.join()
    return out["server"], out["client"]


def test_handshake_accepts_the_secret():
    assert _handshake(SECRET) == (None, "ok")


def test_handshake_refuses_another_secret():
    server, client = _handshake(b"x" * 32)
    assert isinstance(client, RDMAError) and "did not prove" in str(client)
    # the client gave up before proving anything: the server saw it leave
    assert isinstance(server, EOFError)


def test_handshake_refuses_garbage():
    server, client = _handshake(b"", send=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert server == "garbage"
    assert client == b"" or isinstance(client, ConnectionResetError)  # closed, nothing said


def test_messages_are_bounded_maps():
    a, b = socket.socketpair()
    _proto.send_msg(a, {"op": "read", "id": 3})
    assert _proto.recv_msg(b) == {"op": "read", "id": 3}
    a.sendall(b"\xff\xff\xff\x7f")
    with pytest.raises(_proto.ProtocolError, match="over the limit"):
        _proto.recv_msg(b)


# -- pumps ----------------------------------------------------------------------------------

def _pump_through(carrier_a, carrier_b, nbytes: int) -> bytes:
    a, b = socket.socketpair()
    src = _memory.as_memory(bytearray(os.urandom(nbytes)))
    dst = _memory.as_memory(bytearray(nbytes))
    deadline = _proto.Deadline(10, "pump")
    chunks: list[int] = []
    sender = threading.Thread(target=_pump.send, args=(a, carrier_a, src, nbytes, deadline,
                                                       chunks.append))
    sender.start()
    _pump.receive(b, carrier_b, dst, nbytes, deadline)
    sender.join()
    assert len(chunks) == -(-nbytes // carrier_a.chunk)
    assert bytes(dst.view) == bytes(src.view)
    return bytes(dst.view)


@pytest.mark.parametrize("nbytes", [1, 4096, 10 * 4096 + 17])
def test_stream_pump_moves_every_byte_with_a_window(nbytes):
    _pump_through(_pump.Stream(4096, 2), _pump.Stream(4096, 2), nbytes)


@pytest.mark.parametrize("nbytes", [1, 3 * 4096, 25 * 4096 + 5])
def test_ring_pump_moves_every_byte_through_few_slots(nbytes):
    fd = _segments.create(4 * 4096, "unit")
    mapping_a, address_a = _segments.attach(fd, 4 * 4096)
    mapping_b, address_b = _segments.attach(fd, 4 * 4096)
    os.close(fd)
    _pump_through(_pump.Ring(mapping_a, address_a, 4, 4096),
                  _pump.Ring(mapping_b, address_b, 4, 4096), nbytes)


def test_pump_deadline_ends_a_stalled_transfer():
    a, b = socket.socketpair()
    dst = _memory.as_memory(bytearray(100))
    with pytest.raises(TimeoutError):
        _pump.receive(b, _pump.Stream(10, 1), dst, 100, _proto.Deadline(0.2, "stalled"))
    a.close()


# -- segments -------------------------------------------------------------------------------

def test_segments_never_appear_in_dev_shm():
    for kind in _config.SEGMENT_KINDS:
        _config.configure(segments=kind)
        try:
            fd = _segments.create(4096, "unit-job")
            assert _segments.leftovers("unit-job") == []
            os.close(fd)
        finally:
            _config.reset()


def test_sweeps_remove_job_and_dead_process_leftovers():
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    names = [f"{_segments.PREFIX}-unit-a-{dead}-0", f"{_segments.PREFIX}-unit-b-{dead}-1",
             f"{_segments.PREFIX}-unit-b-{os.getpid()}-2"]
    for name in names:
        (_segments.SHM_DIR / name).write_bytes(b"x")
    try:
        assert _segments.sweep_job("unit-a") == 1
        assert {p.name for p in _segments.leftovers()} >= set(names[1:])
        assert _segments.sweep_dead() >= 1  # unit-b of the dead pid; ours stays
        assert [p.name for p in _segments.leftovers("unit-b")] == [names[2]]
    finally:
        for name in names:
            (_segments.SHM_DIR / name).unlink(missing_ok=True)


def test_config_knobs_are_checked():
    with pytest.raises(ValueError, match="transport must be one of"):
        _config.configure(transport="carrier-pigeon")
    os.environ["MONARCH_RDMA_TRANSPORT"] = "tcp"
    try:
        assert _config.transport() == "tcp"
    finally:
        del os.environ["MONARCH_RDMA_TRANSPORT"]
    assert _config.transport() == "auto"
