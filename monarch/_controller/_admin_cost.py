"""What the admin API costs the job's controller: CPU seconds by route.

`monarch top` polls a job several times a second, in the job's own controller, so what each
route costs is a figure users and the console's benchmark need (issue 32: a console may cost
the controller at most 5 % of a core). Each request's CPU time is counted on the thread that
served it (`time.thread_time`: parsing, the answer, its JSON, the write) plus the time its
reads of the supervisor took on the controller's I/O thread (`io_spent`). A collection of the
garbage collector that runs on a serving thread is counted in that request's time (the
topology, the heaviest answer, is built with the collector paused: `_runtime._collector`); what
the request's garbage makes the collector do on other threads is not. A live feed is counted
when it ends. `/v1/stats` shows them (`admin`).

No `gc.callbacks` hook counts collections apart: a Python callback at every collection of the
controller is bytecode on its main thread where a signal handler may run, and an exception the
handler raises there (a script's SIGTERM handler's `SystemExit`) is printed as "Exception
ignored" and lost: the script went on and its `ProcessJob` hosts outlived it.
"""

from __future__ import annotations

import threading
from typing import Any

_request = threading.local()  # .io: seconds of I/O-thread work of the request on this thread


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
        self._routes: dict[str, list[float]] = {}  # by _lock: route -> [requests, cpu, io]

    def add(self, route: str, cpu_s: float, io_s: float) -> None:
        """Counts a request: `cpu_s` on its thread, `io_s` on the I/O thread."""
        with self._lock:
            found = self._routes.get(route)
            if found is None:
                if len(self._routes) >= 256:  # unknown paths are one route: no growth
                    route = "other"
                found = self._routes.setdefault(route, [0, 0.0, 0.0])
            found[0] += 1
            found[1] += cpu_s
            found[2] += io_s

    def snapshot(self) -> dict[str, Any]:
        """`{"routes": {route: {requests, cpu_s, io_s}}, "cpu_s": cpu_s and io_s of all of
        them}`."""
        with self._lock:
            routes = {route: {"requests": int(n), "cpu_s": round(cpu, 6), "io_s": round(io, 6)}
                      for route, (n, cpu, io) in sorted(self._routes.items())}
        return {"routes": routes,
                "cpu_s": round(sum(r["cpu_s"] + r["io_s"] for r in routes.values()), 6)}
