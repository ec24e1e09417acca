"""What the admin API costs the job's controller: CPU seconds by route.

`monarch top` polls a job several times a second, in the job's own controller, so what each
route costs is a figure users and the console's benchmark need (issue 32: a console may cost
the controller at most 5 % of a core). Each request's CPU time is counted on the thread that
served it (`time.thread_time`: parsing, the answer, its JSON, the write) plus the time its
reads of the supervisor took on the controller's I/O thread (`io_spent`). A collection of the
garbage collector runs on whichever thread crosses its threshold, and walks the whole process's
young objects (a full one, ~200 ms at 1,024 actors, all of them): those run on a serving
thread are counted apart (`gc_s`), not in the request's `cpu_s`. Not counted: what the
request's garbage makes the collector do on other threads. A live feed is counted when it ends.
`/v1/stats` shows them (`admin`).
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

_request = threading.local()
# .io: seconds of I/O-thread work of the request on this thread; .gc: seconds of collections
# run on this thread (counted only while `.timing`), .gc_start: when the running one began


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if not getattr(_request, "timing", False):
        return
    now = time.thread_time()
    if phase == "start":
        _request.gc_start = now
    else:
        _request.gc = getattr(_request, "gc", 0.0) + now - getattr(_request, "gc_start", now)


def timing(on: bool) -> float:
    """Starts (`on`) or ends counting collections run on this thread; the seconds they took
    since it started."""
    spent = getattr(_request, "gc", 0.0)
    _request.timing, _request.gc = on, 0.0
    return spent


if _on_collection not in gc.callbacks:
    gc.callbacks.append(_on_collection)


def io_spent(seconds: float) -> None:
    """Adds `seconds` of I/O-thread work to the request the calling thread serves."""
    _request.io = getattr(_request, "io", 0.0) + seconds


def take_io() -> float:
    """The I/O-thread seconds added since the last call on this thread (and resets them)."""
    spent = getattr(_request, "io", 0.0)
    _request.io = 0.0
    return spent


class Costs:
    """Requests and CPU seconds by route (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._routes: dict[str, list[float]] = {}  # by _lock: route -> [requests, cpu, io, gc]

    def add(self, route: str, cpu_s: float, io_s: float, gc_s: float = 0.0) -> None:
        """Counts a request: `cpu_s` on its thread (collections there left out: `gc_s`),
        `io_s` on the I/O thread."""
        with self._lock:
            found = self._routes.get(route)
            if found is None:
                if len(self._routes) >= 256:  # unknown paths are one route: no growth
                    route = "other"
                found = self._routes.setdefault(route, [0, 0.0, 0.0, 0.0])
            found[0] += 1
            found[1] += cpu_s
            found[2] += io_s
            found[3] += gc_s

    def snapshot(self) -> dict[str, Any]:
        """`{"routes": {route: {requests, cpu_s, io_s, gc_s}}, "cpu_s": cpu_s and io_s of all
        of them, "gc_s": theirs}`."""
        with self._lock:
            routes = {route: {"requests": int(n), "cpu_s": round(cpu, 6), "io_s": round(io, 6),
                              "gc_s": round(collected, 6)}
                      for route, (n, cpu, io, collected) in sorted(self._routes.items())}
        return {"routes": routes,
                "cpu_s": round(sum(r["cpu_s"] + r["io_s"] for r in routes.values()), 6),
                "gc_s": round(sum(r["gc_s"] for r in routes.values()), 6)}
