"""Waiting for many replies on a busy host: read them in batches, not one wake at a time.

A `call` to N actors settles when the last of its N replies arrives. Its caller's thread leads
the loop while it waits (`_leader`) and would wake at each reply as it comes. When this host's
CPUs are oversubscribed, each of those wakes costs a thread switch and cold caches (~30-60 µs
of a CPU on the project's 2-core machine) taken from the procs that are still answering. So
while the call waited for and the other pending calls of the process still expect at least
`MIN_REPLIES` replies, and the host is busy, the leader pauses `INTERVAL_S` after each poll and
reads what piled up meanwhile in one go (`ProcessRuntime.lead`). A host with CPUs to spare
reads each reply as it comes, as before; so do waits for fewer replies (`call_one`, a call to a
few actors), and the last few replies of a big call are read as they come: a wait ends at most
one `INTERVAL_S` later than it could.
"""

from __future__ import annotations

import os
import time

MIN_REPLIES = 8
"""Replies the process's pending calls must still expect for a leader waiting on one of them
to read them in batches."""

SCANNED = 64
"""Pending ports looked at to count them (the oldest first): the count stays cheap when many
single calls are pending too."""

INTERVAL_S = 300e-6
"""How long a batching leader lets replies pile up between two polls (at 64 actors on the
project's 2-core machine, 150 µs gained nothing measurable, 300 µs ~12 %, 500 µs ~8 %)."""

ANY = object()
"""What an idle leader (the I/O thread, an idle sync actor's thread) gathers for: the
process's pending calls, whichever thread waits on them (`ProcessRuntime.gathering`)."""

_LOADAVG = "/proc/loadavg"


class HostLoad:
    """Whether this host runs more threads right now than there are CPUs for this process
    (`/proc/loadavg`'s count of runnable threads against `sched_getaffinity`). Thread-safe;
    never busy where the kernel does not say (no `/proc/loadavg`)."""

    def __init__(self, path: str = _LOADAVG, cpus: int | None = None) -> None:
        self._path = path
        self._fd: int | None = None
        self._given_cpus = cpus
        self._cpus = 0
        self._pid = 0

    def busy(self) -> bool:
        """True when more threads are runnable on this host than this process has CPUs."""
        return self.per_cpu() > 1.0

    def per_cpu(self) -> float:
        """Threads runnable on this host now per CPU of this process (0 where unknown)."""
        if self._pid != os.getpid():  # first use, or a forked child: its own descriptor
            self._open()
        if self._fd is None:
            return 0.0
        try:
            runnable = int(os.pread(self._fd, 128, 0).split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        return runnable / max(self._cpus, 1)

    def _open(self) -> None:
        self._pid = os.getpid()
        if self._given_cpus is not None:
            self._cpus = self._given_cpus
        else:
            try:
                self._cpus = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                self._cpus = os.cpu_count() or 1
        try:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None


host_load = HostLoad()
"""This process's view of the host's load (what `ProcessRuntime.lead` asks)."""


def pause() -> None:
    """Lets replies pile up: one `INTERVAL_S` (the leader keeps the baton meanwhile)."""
    time.sleep(INTERVAL_S)
