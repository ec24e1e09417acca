"""The controller's malloc: fewer arenas, and free memory handed back to the system.

A controller runs a dozen threads (I/O, admin API, watcher, exporters, data-plane workers) and
glibc gives each busy thread an arena of its own; what a burst allocates there and frees stays
in the process (fragments of freed memory are not returned while anything above them lives).
Over a long job its RSS then steps up with each burst and never comes down, though the Python
objects it holds stay flat (bench/soak.py's census). Three settings hold it:

- `limit_arenas` caps the arenas at the job's start (to one), and fixes glibc's mmap threshold at
  `CONTROLLER_MMAP_THRESHOLD`: left dynamic, it climbs to 32 MiB after the first big block is
  freed, and every later block under that (a Parquet page, a history pass's Arrow columns, a
  message of a few MiB) is carved from an arena, whose holes it leaves behind; a block above
  the threshold is its own mapping, given back whole when freed;
- `arrow_on_malloc` points pyarrow at this malloc instead of its bundled mimalloc, whose
  segments are outside what `trim` can reach (a history pass's peak of ~80 MB stayed);
- `trim` (glibc's `malloc_trim(0)`, a few ms) returns the free pages of every arena to the
  system; the controller's watcher calls it every `_controller._history_writer.TRIM_S`.

Elsewhere than glibc they do nothing. The procs are tuned the other way (one arena, memory
kept for the next big message: `_host._agent.MALLOC_DEFAULTS`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

M_ARENA_MAX = -8
"""glibc's mallopt parameter number for the arena cap."""
M_TRIM_THRESHOLD = -1
"""glibc's mallopt parameter number for the trim threshold."""
M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter number for the mmap threshold (setting it stops its climb)."""
CONTROLLER_MMAP_THRESHOLD = 1 << 20
"""Blocks from 1 MiB up are mappings of their own in the controller."""

CONTROLLER_ARENAS = 1
"""Arenas of the controller: one heap that every thread shares (the GIL serializes most of
their allocations anyway), which `trim` hands back whole. With four, the three heaps of the
busiest threads kept growing by their holes (50 min soak: 41 → 62 MB as its thread pools
filled); with one arena (and Arrow on it) a 30 min soak's RSS floor grew 1.1 MiB per 10 min
after its warm-up."""

_libc: Any = None


def _glibc() -> Any:
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc has both (musl, macOS do not)
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


def limit_arenas(arenas: int = CONTROLLER_ARENAS,
                 mmap_threshold: int = CONTROLLER_MMAP_THRESHOLD) -> bool:
    """Caps glibc's malloc arenas (threads made later share them) and fixes its mmap threshold;
    False where not glibc. `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` in the environment
    win (each over its own setting)."""
    import os

    libc = _glibc()
    if libc is None:
        return False
    if not os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold)
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def apply_environment(env: dict[str, str]) -> None:
    """Applies `env`'s MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ now:
    glibc reads them once, at a process's start, so a process forked from one that started
    without them (a zygote forked by its host worker) sets them itself. Values above what
    mallopt takes (an int) are capped there."""
    libc = _glibc()
    if libc is None:
        return
    for key, param in (("MALLOC_ARENA_MAX", M_ARENA_MAX), ("MALLOC_MMAP_THRESHOLD_",
                                                           M_MMAP_THRESHOLD),
                       ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD)):
        try:
            libc.mallopt(param, min(int(env[key]), (1 << 31) - 1))
        except (KeyError, ValueError):
            pass


def arrow_on_malloc() -> bool:
    """Makes Arrow allocate from the system's malloc (what `trim` reaches) rather than its
    bundled mimalloc, which reserves a GiB and kept what a history pass had used; False when
    `ARROW_DEFAULT_MEMORY_POOL` already names a pool (the user's choice wins).

    Before pyarrow is imported, Arrow's C++ default is set (`ARROW_DEFAULT_MEMORY_POOL`, read
    once, when the pool is first used: the Parquet writer's buffers come from it too); after,
    only pyarrow's own default can still change (its Python calls; what C++ allocates for
    itself stays on mimalloc)."""
    import os
    import sys

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return False
    if "pyarrow" not in sys.modules:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
        return True
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return True


def trim() -> bool:
    """Returns the free memory of every arena to the system; False where not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
