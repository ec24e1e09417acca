"""Shared-memory segments for the same-host ring, and sweeping what a crash could leave.

A segment is made by the reader's side of a connection and handed to the data server as a
file descriptor (SCM_RIGHTS), so it never needs a name: by default it is a memfd, which never
appears in /dev/shm. With `MONARCH_RDMA_SEGMENTS=devshm` it is a /dev/shm file named
``monarch-rdma-<job>-<pid>-<n>`` that is unlinked as soon as it is open; only a crash in
between leaves it, and `sweep_job` (the controller, at job end) and `sweep_dead` (each data
server at start: files of dead pids) remove those.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import re
from pathlib import Path

from . import _config
from .._runtime._pids import pid_alive

PREFIX = "monarch-rdma"
SHM_DIR = Path("/dev/shm")
_NAMED = re.compile(rf"^{PREFIX}-(?P<job>.+)-(?P<pid>\d+)-(?P<n>\d+)$")
_counter = itertools.count()


def create(size: int, job_id: str) -> int:
    """Makes a segment of `size` bytes; returns its fd (the caller closes it)."""
    if _config.segment_kind() == "memfd" and hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"{PREFIX}-{job_id}", os.MFD_CLOEXEC)
    else:
        path = SHM_DIR / f"{PREFIX}-{job_id}-{os.getpid()}-{next(_counter)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.unlink(path)  # the fd keeps the memory; the name must not outlive this call
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def attach(fd: int, size: int) -> tuple[mmap.mmap, int]:
    """Maps a segment; returns the mapping and its address. The fd may be closed after."""
    mapping = mmap.mmap(fd, size)
    return mapping, ctypes.addressof(ctypes.c_char.from_buffer(mapping))


def leftovers(job_id: str | None = None) -> list[Path]:
    """Named segments in /dev/shm (of one job, or of every job)."""
    found = []
    for path in SHM_DIR.glob(f"{PREFIX}-*"):
        match = _NAMED.match(path.name)
        if match and (job_id is None or match["job"] == job_id):
            found.append(path)
    return found


def sweep_job(job_id: str) -> int:
    """Removes every named segment of a job; returns how many. The controller calls it at the
    end of its job (all its procs are gone by then)."""
    return sum(_unlink(path) for path in leftovers(job_id))


def sweep_dead() -> int:
    """Removes named segments of this user whose creating process is gone."""
    removed = 0
    for path in leftovers():
        match = _NAMED.match(path.name)
        if match and _owned(path) and not pid_alive(int(match["pid"])):
            removed += _unlink(path)
    return removed


def _owned(path: Path) -> bool:
    try:
        return path.stat().st_uid == os.getuid()
    except OSError:
        return False


def _unlink(path: Path) -> int:
    try:
        path.unlink()
    except OSError:
        return 0
    return 1
