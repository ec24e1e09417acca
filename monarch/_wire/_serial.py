"""Pickling of message payloads: cloudpickle protocol 5 with out-of-band buffers.

Large buffers (numpy arrays, CPU tensors, bytes/bytearrays/memoryviews over a threshold) are not
copied into the pickle stream; they travel as their own zmq frames and are rebuilt on the receiving
side as views of the received frame, which is writable (a bytearray as a copy of it: it owns its
memory; bytes as the frame itself when a lane received it as a `bytes` object, see `_received`,
else as a copy). Torch is only touched when a tensor is pickled.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from collections import ChainMap
from typing import Any, Callable, Sequence

import cloudpickle
from cloudpickle.cloudpickle import _code_reduce as _cloudpickle_code_reduce

from . import _received

OOB_MIN_BYTES = 64 * 1024
"""Buffers at least this big travel as their own frames."""

Buffers = list[pickle.PickleBuffer]


def _code_reduce(code: types.CodeType) -> Any:
    """cloudpickle's reduction of a code object, with its real file name: cloudpickle writes
    ``<dynamic-code>``, so tracebacks, pdb, py-spy and `monarch stack` of an actor defined in
    the user's script said ``File "<dynamic-code>", line 19`` with no source. With the name,
    `linecache` finds the file where the proc runs (the same host, or a shared file system)."""
    rebuild, args = _cloudpickle_code_reduce(code)
    return rebuild, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle with zero-copy reducers for bytes and torch tensors, a hook for refs, and
    code objects that keep their file name."""

    dispatch_table = ChainMap({types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table)

    def __init__(self, file: io.BytesIO, buffer_callback: Callable[[Any], Any] | None,
                 persistent: Callable[[Any], Any] | None) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._persistent = persistent

    def persistent_id(self, obj: Any) -> Any:
        if self._persistent is None:
            return None
        return self._persistent(obj)

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is _BigBytes:
            rebuild = _bytes_from_buffer if type(obj.data) is bytes else _bytearray_from_buffer
            return rebuild, (pickle.PickleBuffer(obj.data),)
        if kind is memoryview:
            return _reduce_memoryview(obj)
        if "torch" in sys.modules and kind.__module__.startswith("torch"):
            reduced = _reduce_tensor(obj)
            if reduced is not None:
                return reduced
        return super().reducer_override(obj)


class _BigBytes:
    """Marks a large `bytes` or `bytearray` for out-of-band pickling.

    The pickler never offers exact `bytes`/`bytearray` to `reducer_override` (it writes them
    in-band itself), so `dumps` swaps large ones found near the top of the payload (arguments,
    results, their direct containers) for this.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data


def _mark_big_bytes(obj: Any, depth: int = 2) -> Any:
    kind = type(obj)
    if kind is bytes or kind is bytearray:
        return _BigBytes(obj) if len(obj) >= OOB_MIN_BYTES else obj
    if depth == 0:
        return obj
    if kind is tuple or kind is list:
        marked = [_mark_big_bytes(item, depth - 1) for item in obj]
        if any(a is not b for a, b in zip(marked, obj)):
            return kind(marked)
        return obj
    if kind is dict:
        if any(type(v) in (bytes, bytearray, tuple, list, dict) for v in obj.values()):
            return {k: _mark_big_bytes(v, depth - 1) for k, v in obj.items()}
    return obj


_SCALARS = frozenset({int, float, str, bool, type(None), complex})
PLAIN_ITEMS = 256
"""The most items a tuple, list or dict may hold for `dumps`'s plain path."""


def _plain(obj: Any, depth: int = 3) -> bool:
    """True when `obj` is builtin scalars (exact types; small `bytes` too) in tuples, lists
    and str- or int-keyed dicts of at most `PLAIN_ITEMS` items, `depth` containers deep at
    most: what the C pickler writes byte for byte as our cloudpickle `_Pickler` would (no
    class, function, buffer or reference in it), without a pickler built per payload and a
    Python `reducer_override` call per object (`((0,), {})`, a call's arguments: 6.3 -> 1.6 us;
    an int an actor returns: 1.9 -> 0.4 us)."""
    kind = type(obj)
    if kind in _SCALARS:
        return True
    if kind is bytes:
        return len(obj) < OOB_MIN_BYTES
    if kind is not tuple and kind is not list and kind is not dict:
        return False
    if depth == 0 or len(obj) > PLAIN_ITEMS:
        return False
    if kind is dict:
        for key, value in obj.items():
            if (type(key) is not str and type(key) is not int) or not _plain(value, depth - 1):
                return False
        return True
    for item in obj:
        if not _plain(item, depth - 1):
            return False
    return True


def dumps(obj: Any, persistent: Callable[[Any], Any] | None = None, *,
          in_band: bool = False) -> tuple[bytes, Buffers]:
    """Pickles `obj`; returns the pickle bytes and the out-of-band buffers (in order), none
    when `in_band` (everything in the bytes: for a payload that travels as one field)."""
    if persistent is None and _plain(obj):
        return pickle.dumps(obj, protocol=5), []
    buffers: Buffers = []
    file = io.BytesIO()
    _Pickler(file, None if in_band else buffers.append, persistent).dump(_mark_big_bytes(obj))
    return file.getvalue(), buffers


def dumps_exception(exc: BaseException, traceback: str, *,
                    in_band: bool = False) -> tuple[bytes, Buffers]:
    """Pickles `(exc, traceback)`, as a remote exception travels. One that does not pickle
    travels as a RuntimeError of its text (`ValueError: bad`), with the same traceback: the
    receiver always learns what failed."""
    try:
        return dumps((exc, traceback), in_band=in_band)
    except Exception:  # noqa: BLE001 - the exception itself does not pickle
        return dumps((RuntimeError(_exception_text(exc)), traceback), in_band=in_band)


def _exception_text(exc: BaseException) -> str:
    """`ValueError: bad`: the exception's type and message (even when its str() raises)."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the type
        message = "<exception str() failed>"
    return f"{type(exc).__name__}: {message}"


def loads(data: bytes | memoryview, buffers: Sequence[Any] = (),
          persistent: Callable[[Any], Any] | None = None) -> Any:
    """Unpickles what `dumps` produced; `buffers` are the received frames' buffers, in order."""
    if persistent is None:  # 1.7 -> 0.5 us for a small payload: no stream, no Unpickler
        return pickle.loads(data, buffers=buffers)
    unpickler = pickle.Unpickler(io.BytesIO(data), buffers=buffers)
    unpickler.persistent_load = persistent  # type: ignore[assignment]
    return unpickler.load()


def _bytes_from_buffer(buf: Any) -> bytes:
    """A `bytes` payload: the received part itself when it is a `bytes` object already
    (`_received`), else a copy of the frame."""
    whole = _received.whole_bytes(buf)
    return whole if whole is not None else bytes(buf)


def _bytearray_from_buffer(buf: Any) -> bytearray:
    return bytearray(buf)


def _reduce_memoryview(view: memoryview) -> Any:
    """A memoryview arrives as a memoryview of the same format and shape: a view of the
    received frame when it is large (no copy), of its own bytes otherwise."""
    shape = tuple(view.shape or ())
    if view.nbytes >= OOB_MIN_BYTES and view.c_contiguous:
        raw: Any = pickle.PickleBuffer(view)
    else:
        raw = view.tobytes()
    return _memoryview_from_buffer, (raw, view.format, shape)


def _memoryview_from_buffer(raw: Any, fmt: str, shape: tuple[int, ...]) -> memoryview:
    view = memoryview(raw)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view if fmt == "B" and len(shape) == 1 else view.cast(fmt, shape)  # type: ignore[call-overload]


def _reduce_tensor(obj: Any) -> Any:
    """Reduces a dense CPU tensor to a zero-copy buffer; None where torch must do it itself."""
    import torch

    if type(obj) is not torch.Tensor and type(obj) is not torch.nn.Parameter:
        return None
    if obj.device.type != "cpu" or obj.layout != torch.strided or obj.is_quantized:
        return None
    if obj.requires_grad and not obj.is_leaf:
        return None  # torch's own pickling raises the error users know
    flat = obj.detach().contiguous().reshape(-1)
    if flat.numel() * flat.element_size() < OOB_MIN_BYTES:
        raw: Any = bytes(flat.view(torch.uint8).numpy()) if flat.numel() else b""
    else:
        raw = pickle.PickleBuffer(flat.view(torch.uint8).numpy())  # type: ignore[arg-type]
    is_param = type(obj) is torch.nn.Parameter
    return _rebuild_tensor, (raw, str(obj.dtype), tuple(obj.shape), obj.requires_grad, is_param)


def _rebuild_tensor(raw: Any, dtype: str, shape: tuple[int, ...], requires_grad: bool,
                    is_param: bool) -> Any:
    import torch

    torch_dtype = getattr(torch, dtype.removeprefix("torch."))
    if len(raw) == 0:
        tensor = torch.empty(shape, dtype=torch_dtype)
    else:
        if isinstance(raw, bytes):
            raw = bytearray(raw)
        tensor = torch.frombuffer(raw, dtype=torch.uint8).view(torch_dtype).reshape(shape)
    if is_param:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor
