"""Received parts that are `bytes` objects already: a big payload arrives with one copy, not three.

A big part (`_lane.BIG`, 1 MiB, and up) used to land in a fresh `bytearray`, which zero-fills
what the read then overwrites, and a `bytes` payload was then copied out of it
(`_serial._bytes_from_buffer`): for 64 MiB, two allocations whose pages fault in (~28 ms
each here, cold) and a memset and a copy warm (~5 ms), besides the read itself. Now the part's
memory is that of a `bytes` object made uninitialized (CPython's
``PyBytes_FromStringAndSize(NULL, n)``), filled by the read through a writable view, and the
frame that carries it (`OwnedFrame`) remembers it: unpickling a `bytes` payload hands that very
object out (`whole_bytes`), a tensor, an array or a memoryview is a writable view of its memory
as before.

Invariant: nothing writes through the view once the part is complete, except a writable view a
payload asked for (a tensor, an array, a memoryview), which is never also handed out as `bytes`
(a part is rebuilt by the one reduction its pickle names). The `bytes` object is new and
reachable only through the frame until then, so filling it breaks no one's assumption that
`bytes` do not change.

Where ctypes cannot make such an object (not CPython), parts are `bytearray`s and a `bytes`
payload is a copy, as before.
"""

from __future__ import annotations

import ctypes
from typing import Any

import zmq


class OwnedFrame(zmq.Frame):
    """A zmq frame over the memory of `owner`, a `bytes` object, writable through `buffer`."""

    __slots__ = ("owner",)


_new_bytes: Any = None
_DATA_OFFSET = bytes.__basicsize__ - 1  # where a bytes object's data starts (ob_sval)


def _maker() -> Any:
    global _new_bytes
    if _new_bytes is None:
        try:
            make = ctypes.pythonapi.PyBytes_FromStringAndSize
            make.restype = ctypes.py_object
            make.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)
            _new_bytes = make
        except (AttributeError, OSError):  # not CPython
            _new_bytes = False
    return _new_bytes


def frame(size: int) -> tuple[zmq.Frame, memoryview]:
    """A frame of `size` bytes to read a part into, and a writable byte view of its memory.

    Raises:
        MemoryError: `size` bytes cannot be had.
    """
    make = _maker()
    if not make:
        data = bytearray(size)
        return zmq.Frame(data, copy=False), memoryview(data)
    owner = make(None, size)  # uninitialized: the read fills every byte
    memory = (ctypes.c_char * size).from_address(id(owner) + _DATA_OFFSET)
    memory.owner = owner  # type: ignore[attr-defined]  # the view's exporter keeps it alive
    made = OwnedFrame(memory, copy=False)
    made.owner = owner
    return made, made.buffer


def wrap(data: bytes) -> zmq.Frame:
    """A frame of a part received whole as `data`, whose `bytes` payload is `data` itself."""
    made = OwnedFrame(data, copy=False)
    made.owner = data
    return made


def whole_bytes(buffer: Any) -> bytes | None:
    """The `bytes` object whose whole memory `buffer` (a received frame's `buffer`) is, or
    None when it is not one: another kind of frame, or a part of one."""
    if type(buffer) is not memoryview:
        return None
    owner = getattr(buffer.obj, "owner", None) if type(buffer.obj) is OwnedFrame else None
    if owner is None or buffer.nbytes != len(owner) or not buffer.c_contiguous:
        return None
    return owner  # type: ignore[no-any-return]
