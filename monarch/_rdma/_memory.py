"""Local memory: the host bytes behind a tensor, array, bytearray or memoryview.

`as_memory(obj)` gives a `Memory`: a flat byte view of the object, its address, and, for CUDA
tensors, a host staging copy with `pull()` (device to host) and `push()` (host to device). The
view keeps the object alive and, for a bytearray, exported (so it cannot be resized meanwhile).
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys
from typing import Any

memmove = ctypes.memmove
"""Copies n bytes between addresses; a ctypes foreign call, so it releases the GIL."""


@dataclasses.dataclass(eq=False)
class Memory:
    """Flat host bytes of a user object.

    Attributes:
        view: the bytes, a 1-D memoryview of format 'B'.
        address: where `view` starts in this process's memory.
        readonly: True when the object must not be written (e.g. `bytes`).
        device: "cpu", or the CUDA device the object lives on (then `view` is a staging copy).
        keep: the user object, held so the bytes stay valid.
        staging: for a CUDA tensor, the host tensor behind `view`; None on the CPU.
    """

    view: memoryview
    address: int
    readonly: bool
    device: str = "cpu"
    keep: Any = None
    staging: Any = None

    @property
    def nbytes(self) -> int:
        return self.view.nbytes

    def pull(self) -> None:
        """Refreshes the host bytes from the device (nothing to do on the CPU)."""
        if self.staging is not None:
            self.staging.copy_(_bytes_of(self.keep))

    def push(self) -> None:
        """Copies the host bytes back to the device (nothing to do on the CPU)."""
        if self.staging is not None:
            _bytes_of(self.keep).copy_(self.staging)


def as_memory(obj: Any, what: str = "buffer") -> Memory:
    """The flat bytes of `obj` (torch tensor, numpy array or any buffer-protocol object).

    Raises:
        ValueError: `obj` is not contiguous.
        TypeError: `obj` exposes no memory.
    """
    if _is_torch_tensor(obj):
        return _tensor_memory(obj, what)
    if type(obj).__module__ == "numpy" and hasattr(obj, "flags"):
        return _numpy_memory(obj, what)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what} must be a torch.Tensor, numpy array, bytearray, memoryview "
                        f"or another buffer-protocol object, not {type(obj).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous (got a strided memoryview of shape "
                         f"{view.shape}); copy it into contiguous memory first")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return Memory(view, address_of(view), view.readonly, "cpu", obj)


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")  # never imported here: a tensor means torch is loaded
    return torch is not None and isinstance(obj, torch.Tensor)


def is_cuda(obj: Any) -> bool:
    """True for a tensor on a CUDA device (its bytes need staging through host memory)."""
    return getattr(getattr(obj, "device", None), "type", None) == "cuda"


def _tensor_memory(tensor: Any, what: str) -> Memory:
    if not tensor.is_contiguous():
        raise ValueError(f"{what} must be a contiguous tensor (got shape {tuple(tensor.shape)}, "
                         f"strides {tensor.stride()}); call .contiguous() first")
    nbytes = tensor.numel() * tensor.element_size()
    if is_cuda(tensor):
        return _staged_memory(tensor, nbytes)
    view = _view_at(tensor.data_ptr(), nbytes)
    return Memory(view, tensor.data_ptr(), False, "cpu", tensor)


def _staged_memory(tensor: Any, nbytes: int) -> Memory:
    import torch

    staging = torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
    return Memory(_view_at(staging.data_ptr(), nbytes), staging.data_ptr(), False,
                  str(tensor.device), tensor, staging)


def _bytes_of(tensor: Any) -> Any:
    """A tensor's bytes as a flat uint8 tensor on its device (no copy)."""
    import torch

    flat = tensor.reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)


def _numpy_memory(array: Any, what: str) -> Memory:
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} must be a C-contiguous array (got shape {array.shape}, "
                         f"strides {array.strides}); use numpy.ascontiguousarray first")
    flat = array.reshape(-1).view("u1")
    view = memoryview(flat)
    return Memory(view, array.ctypes.data, not array.flags.writeable, "cpu", array)


def _view_at(address: int, nbytes: int) -> memoryview:
    if nbytes == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_ubyte * nbytes).from_address(address)).cast("B")


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


def address_of(view: memoryview) -> int:
    """The address of a contiguous memoryview's first byte (read-only views included)."""
    if view.nbytes == 0:
        return 0
    if not view.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(view))
    buf = _PyBuffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    if get(view, ctypes.byref(buf), 0) != 0:
        raise ValueError("cannot take the address of this buffer")
    try:
        return int(buf.buf)
    finally:
        release = ctypes.pythonapi.PyBuffer_Release
        release.argtypes = [ctypes.POINTER(_PyBuffer)]
        release(ctypes.byref(buf))
