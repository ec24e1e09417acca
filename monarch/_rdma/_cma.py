"""Cross-memory attach: one copy straight between two processes' memory on one host.

`process_vm_readv`/`process_vm_writev` need ptrace rights over the owner (same user, and Yama
allowing it: the owner calls `allow_readers()` so that scope 1 does too). When the kernel says
no (EPERM, ENOSYS) the caller falls back to the shared-memory ring.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from typing import Any

from . import _config
from ._errors import OwnerGoneError, RDMAError
from ._proto import Deadline

PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)


class CmaUnavailable(Exception):
    """The kernel refuses cross-memory attach between these processes."""


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc: Any = None
_refused = False  # set once the kernel said EPERM/ENOSYS: this process stops trying


def _lib() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        for name in ("process_vm_readv", "process_vm_writev"):
            fn = getattr(_libc, name)
            fn.restype = ctypes.c_ssize_t
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                           ctypes.c_ulong, ctypes.c_ulong]
    return _libc


def usable() -> bool:
    """False once the kernel refused cross-memory attach in this process."""
    return not _refused


def allow_readers() -> None:
    """Lets other processes of this user attach to this one under Yama ptrace scope 1."""
    with contextlib.suppress(Exception):  # best effort: without it, the ring path is used
        _lib().prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)


def copy(pid: int, local: int, remote: int, nbytes: int, *, write: bool,
         deadline: Deadline) -> None:
    """Copies `nbytes` from the process `pid` at `remote` to `local` (or back, `write=True`).

    Raises:
        CmaUnavailable: the kernel does not allow it (fall back to another path).
        OwnerGoneError: the process is gone.
        RDMAError: the remote memory is not mapped.
    """
    global _refused
    fn = _lib().process_vm_writev if write else _lib().process_vm_readv
    done = 0
    while done < nbytes:
        n = min(_config.CMA_CHUNK_BYTES, nbytes - done)
        local_iov, remote_iov = _IoVec(local + done, n), _IoVec(remote + done, n)
        got = fn(pid, ctypes.byref(local_iov), 1, ctypes.byref(remote_iov), 1, 0)
        if got <= 0:
            code = ctypes.get_errno() if got < 0 else errno.EFAULT
            if code in (errno.EPERM, errno.ENOSYS, errno.EACCES):
                _refused = True
                raise CmaUnavailable(os.strerror(code))
            if code == errno.ESRCH:
                raise OwnerGoneError(f"process {pid} is gone")
            raise RDMAError(f"cross-memory copy with process {pid} failed: {os.strerror(code)}")
        done += got
        deadline.left()
