"""Payload pickling: out-of-band buffers for big data, usable (writable) on the other side."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from monarch._wire import _serial


def address(buffer) -> int:
    """Where a buffer's bytes start in memory."""
    view = memoryview(buffer).cast("B")
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


def round_trip(obj):
    data, buffers = _serial.dumps(obj)
    # The receiver gets each buffer as its own (writable) frame.
    frames = [bytearray(memoryview(b).cast("B")) for b in buffers]
    return _serial.loads(data, frames), len(buffers)


def test_small_values_stay_in_band():
    value, nbuf = round_trip({"a": [1, 2, 3], "b": "x" * 100})
    assert value == {"a": [1, 2, 3], "b": "x" * 100} and nbuf == 0


def test_large_bytes_go_out_of_band():
    payload = bytes(range(256)) * 1024
    value, nbuf = round_trip(payload)
    assert value == payload and type(value) is bytes and nbuf == 1


def test_large_bytearrays_and_memoryviews_go_out_of_band():
    payload = bytes(range(256)) * 1024
    big = bytearray(payload)
    view = memoryview(big).cast("B", [256, 1024])
    data, buffers = _serial.dumps(([big], {"view": view, "small": bytearray(b"ab")}))
    # sending copies nothing: the frames are the caller's own memory, and the pickle is tiny
    assert [address(b) for b in buffers] == [address(big)] * 2 and len(data) < 1024
    frames = [bytearray(memoryview(b).cast("B")) for b in buffers]
    (got,), kwargs = _serial.loads(data, frames)
    assert type(got) is bytearray and got == big
    assert type(kwargs["small"]) is bytearray and kwargs["small"] == b"ab"
    got_view = kwargs["view"]  # a view of the received frame, of the same shape and format
    assert got_view.shape == (256, 1024) and got_view.format == "B"
    assert address(got_view) == address(frames[1]) and got_view.tobytes() == payload


def test_memoryviews_small_or_strided_keep_format_and_values():
    import array

    for view in (memoryview(b"abc"), memoryview(array.array("d", [1.0, 2.5])),
                 memoryview(array.array("i", range(100_000)))[::2]):
        value, _ = round_trip(view)
        assert type(value) is memoryview and value.format == view.format
        assert value.tolist() == view.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.complex64])
def test_tensors_round_trip_writable(dtype):
    tensor = (torch.arange(70_000) % 7).to(dtype).reshape(700, 100)
    value, nbuf = round_trip(tensor)
    assert nbuf == 1 and value.dtype == dtype and value.shape == tensor.shape
    assert torch.equal(value, tensor)
    value[0, 0] = 1  # writable, no warning, no copy needed
    assert value[0, 0] == 1


def test_tensor_views_parameters_and_grad_flags():
    base = torch.randn(400, 100)
    view = base[::2, 10:60]
    value, _ = round_trip(view)
    assert torch.equal(value, view) and value.is_contiguous()
    param = torch.nn.Parameter(torch.randn(300, 100))
    value, _ = round_trip(param)
    assert isinstance(value, torch.nn.Parameter) and value.requires_grad
    small, nbuf = round_trip(torch.ones(3, requires_grad=True))
    assert small.requires_grad and nbuf == 0
    empty, _ = round_trip(torch.empty(0, 5))
    assert empty.shape == (0, 5)


def test_numpy_arrays_are_zero_copy_and_writable():
    array = np.arange(100_000, dtype=np.float64)
    value, nbuf = round_trip(array)
    assert nbuf == 1 and np.array_equal(value, array)
    value[0] = 5.0
    assert value[0] == 5.0


def test_big_tensors_and_arrays_are_never_copied():
    """Sending: the out-of-band buffer is the tensor's own memory. Receiving: the rebuilt
    tensor (array) is a view of the received frame, not a copy of it."""
    tensor = torch.arange(100_000, dtype=torch.float32)
    array = np.arange(100_000, dtype=np.int64)
    data, buffers = _serial.dumps([tensor, array])
    assert [address(b) for b in buffers] == [tensor.data_ptr(), array.ctypes.data]
    frames = [bytearray(memoryview(b).cast("B")) for b in buffers]
    got_tensor, got_array = _serial.loads(data, frames)
    assert got_tensor.data_ptr() == address(frames[0])
    assert np.shares_memory(got_array, np.frombuffer(frames[1], dtype=np.uint8))
    frames[0][0:4] = np.float32(42).tobytes()  # a write to the frame is seen by the tensor
    assert got_tensor[0] == 42


def test_unpicklable_raises():
    with pytest.raises(TypeError):
        _serial.dumps(threading.Lock())


def test_classes_from_main_are_pickled_by_value():
    namespace: dict = {"__name__": "__main__"}
    exec("class Local:\n    def f(self):\n        return 7\n", namespace)
    data, _ = _serial.dumps(namespace["Local"])
    assert _serial.loads(data)().f() == 7


class Unpicklable(Exception):
    """Holds a lock: pickling it fails."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.lock = threading.Lock()


class BrokenStr(Unpicklable):
    def __str__(self) -> str:
        raise ValueError("no text")


class CarriesBytes(Exception):
    """Holds a big buffer, which goes out of band unless asked not to."""

    def __init__(self, data: memoryview) -> None:
        super().__init__("big")
        self.data = data


def test_an_exception_travels_with_its_traceback():
    data, buffers = _serial.dumps_exception(KeyError("k"), "  File x.py")
    exc, tb = _serial.loads(data, buffers)
    assert type(exc) is KeyError and exc.args == ("k",) and tb == "  File x.py"


def test_an_exception_that_does_not_pickle_travels_as_its_text():
    exc, tb = _serial.loads(*_serial.dumps_exception(Unpicklable("bad"), "tb"))
    assert type(exc) is RuntimeError and str(exc) == "Unpicklable: bad" and tb == "tb"
    exc, _ = _serial.loads(*_serial.dumps_exception(BrokenStr("bad"), "tb"))
    assert str(exc) == "BrokenStr: <exception str() failed>"


def test_an_exception_pickled_in_band_needs_no_frames():
    big = memoryview(bytes(range(256)) * 1024)
    data, buffers = _serial.dumps_exception(CarriesBytes(big), "tb", in_band=True)
    assert buffers == []
    exc, _ = _serial.loads(data)
    assert bytes(exc.data) == bytes(big)
    assert _serial.dumps_exception(CarriesBytes(big), "tb")[1]  # out of band by default


PLAIN = [None, 3, -2**70, 1.5, 2 + 3j, True, "naïve", b"\x00" * 100, ((0,), {}),
         (("a", 2.5), {"k": 1, 7: None}), [1.5] * 256, {"loss": 0.5, "step": [1, 2, 3]}]


@pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
def test_plain_values_skip_the_pickler_and_pickle_the_same(value, monkeypatch):
    """A payload of builtin scalars in small containers is written by the C pickler alone, to
    the very bytes our cloudpickle pickler writes (a peer of an older build reads it), and
    reads back without an Unpickler of ours."""
    import io

    expected = io.BytesIO()
    _serial._Pickler(expected, [].append, None).dump(value)

    def refuse(*_args, **_kwargs):
        raise AssertionError("a plain value went through the cloudpickle pickler")

    monkeypatch.setattr(_serial, "_Pickler", refuse)
    data, buffers = _serial.dumps(value)
    assert (data, buffers) == (expected.getvalue(), [])
    assert _serial.loads(memoryview(data)) == value


NOT_PLAIN = [b"\x01" * _serial.OOB_MIN_BYTES, [0] * (_serial.PLAIN_ITEMS + 1),
             ([[[[1]]]],), {(1, 2): 3}, {"f": print}, (1, bytearray(b"ab")), [range(3)],
             type("Sub", (int,), {})(4)]


@pytest.mark.parametrize("value", NOT_PLAIN, ids=range(len(NOT_PLAIN)))
def test_anything_else_still_goes_through_the_pickler(value, monkeypatch):
    """Big bytes (out of band), long or deep containers, other keys, functions, subclasses of
    builtins: the plain path takes none of them."""
    used = []
    real = _serial._Pickler

    def counting(*args, **kwargs):
        used.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(_serial, "_Pickler", counting)
    data, buffers = _serial.dumps(value)
    assert used
    back = _serial.loads(data, [memoryview(b) for b in buffers])
    assert back == value or type(value).__name__ == "Sub" and back == 4


def test_a_persistent_hook_sees_plain_values_too():
    """With a persistent-id hook (refs travelling by id) the pickler runs even for a plain
    payload: the hook decides, not the shape."""
    seen = []

    def persistent(obj):
        seen.append(obj)
        return "ref" if obj == "swap me" else None

    data, _ = _serial.dumps(("swap me", 1), persistent)
    assert "swap me" in seen
    assert _serial.loads(data, persistent=lambda pid: pid + "!") == ("ref!", 1)
