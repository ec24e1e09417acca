"""The controller's malloc: fewer arenas, and free memory handed back to the system.

A controller runs a dozen threads (I/O, admin API, watcher, exporters, data-plane workers) and
glibc gives each busy thread an arena of its own; what a burst allocates there and frees stays
in the process (fragments of freed memory are not returned while anything above them lives).
Over a long job its RSS then steps up with each burst and never comes down, though the Python
objects it holds stay flat (bench/soak.py's census). `limit_arenas` caps the arenas at the
job's start; `trim` (glibc's `malloc_trim(0)`, a few ms) returns the free pages of every arena
to the system, and the controller's watcher calls it once a minute. Elsewhere than glibc both
do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

M_ARENA_MAX = -8
"""glibc's mallopt parameter number for the arena cap."""

CONTROLLER_ARENAS = 4
"""Arenas of the controller (the procs run with one: `_host._agent.MALLOC_DEFAULTS`)."""

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


def limit_arenas(arenas: int = CONTROLLER_ARENAS) -> bool:
    """Caps glibc's malloc arenas (threads made later share them); False where not glibc.
    `MALLOC_ARENA_MAX` in the environment wins."""
    import os

    libc = _glibc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Returns the free memory of every arena to the system; False where not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
