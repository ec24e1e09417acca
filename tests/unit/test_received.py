"""Received parts that are `bytes` objects already (`monarch._wire._received`): a big `bytes`
payload is the received memory itself, a tensor or memoryview a writable view of it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monarch._wire import _received, _serial


def received(payload):
    """Pickles `payload` and lands each out-of-band buffer in a frame as a lane reads a big
    part (`_received.frame`, filled through its view); the frames and the unpickled value."""
    data, buffers = _serial.dumps(payload)
    frames = []
    for buffer in buffers:
        raw = memoryview(buffer).cast("B")
        frame, view = _received.frame(raw.nbytes)
        view[:] = raw
        frames.append(frame)
    return frames, _serial.loads(data, [frame.buffer for frame in frames])


def test_a_big_bytes_payload_is_the_received_memory_itself_not_a_copy():
    payload = bytes(range(256)) * 8192  # 2 MiB
    frames, value = received(payload)
    assert type(value) is bytes and value == payload
    assert value is frames[0].owner  # what the read filled: no copy


def test_bytes_in_a_container_and_a_bytearray_beside_them():
    payload = {"a": bytes(300_000), "b": bytearray(b"x" * 200_000)}
    frames, value = received(payload)
    assert value == payload and type(value["b"]) is bytearray
    assert value["a"] is frames[0].owner
    value["b"][0] = 0  # a bytearray owns a copy: the frame is untouched
    assert bytes(frames[1].buffer[:1]) == b"x"


def test_a_tensor_and_an_array_are_writable_views_of_the_received_memory():
    tensor = torch.arange(300_000, dtype=torch.float32)
    array = np.ones(100_000)
    frames, (t, a) = received((tensor, array))
    assert torch.equal(t, tensor) and np.array_equal(a, array)
    t += 1  # writable, no warning, and it is the frame's memory
    a *= 2
    assert np.frombuffer(frames[0].buffer, dtype=np.float32)[0] == 1.0
    assert np.frombuffer(frames[1].buffer, dtype=np.float64)[0] == 2.0


def test_only_a_whole_frame_is_handed_out_as_its_bytes():
    frame, view = _received.frame(1 << 16)
    view[:] = b"z" * (1 << 16)
    assert _received.whole_bytes(frame.buffer) is frame.owner
    assert _received.whole_bytes(frame.buffer[1:]) is None  # a part of it
    assert _received.whole_bytes(memoryview(b"z" * 16)) is None  # another exporter
    assert _received.whole_bytes(b"z") is None


def test_a_part_received_whole_is_handed_out_as_it_is():
    data = bytes(200_000)
    frame = _received.wrap(data)
    assert _serial._bytes_from_buffer(frame.buffer) is data


def test_without_ctypes_bytes_the_parts_are_bytearrays_and_bytes_a_copy(monkeypatch):
    monkeypatch.setattr(_received, "_new_bytes", False)
    payload = bytes(range(256)) * 4096
    frames, value = received(payload)
    assert value == payload and type(value) is bytes
    assert not isinstance(frames[0], _received.OwnedFrame)


def test_a_size_no_memory_holds_is_a_memory_error():
    with pytest.raises(MemoryError):
        _received.frame(1 << 62)
