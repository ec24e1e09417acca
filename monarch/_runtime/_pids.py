"""Whether a process is alive, read from /proc: the one check for every record that names a
process by its pid (a run directory's owner, a worker, a job's controller, a segment's creator).

A pid names a process only until it exits: the kernel then hands the number to a later one. With
its start time (`start_time`, clock ticks since boot) a pid names one process for good, so a
record that keeps both is checked against reuse. A zombie is not alive: it has exited, only its
parent has not collected its status yet (checking does not collect it: that is the parent's).
A pid of another host cannot be checked here, and is never called dead.
"""

from __future__ import annotations

import os
import socket

GONE = "gone"
"""`start_time` of a process that exited (or cannot be read)."""

_EXITED = ("Z", "X")
"""States of /proc/<pid>/stat of a process that has exited: zombie, dead."""


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (the state first, then the
    parent pid...), or None when it cannot be read (no such process, or hidden from us)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields or None


def start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot): with the pid, it names one process;
    `GONE` once it exited (a zombie included) or when it cannot be read."""
    fields = proc_stat(pid)
    if fields is None or fields[0] in _EXITED or len(fields) < 20:
        return GONE
    return fields[19]


def this_host(hostname: str | None) -> bool:
    """True when `hostname` is None (not recorded) or this host's name."""
    return hostname is None or hostname == socket.gethostname()


def pid_alive(pid: int, start: str | None = None, *, hostname: str | None = None) -> bool:
    """True while process `pid` runs (a zombie does not) and, when `start` (its `start_time`)
    is given, is still the process that started then, not a later one given the same pid.

    True as well for a pid of another host (`hostname` given and not this one): it cannot be
    checked here, and a caller must not take it for dead."""
    if not this_host(hostname):
        return True
    if pid <= 0:  # os.kill(0, ...) and negative pids name process groups, not a process
        return False
    fields = proc_stat(pid)
    if fields is None:  # gone, or another user's process hidden from us (hidepid): never
        return start is None and _exists(pid)  # the one recorded, which was ours to read
    if fields[0] in _EXITED:
        return False
    return start is None or (len(fields) >= 20 and fields[19] == start)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True
