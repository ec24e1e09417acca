"""Whether anyone watches the job live, and every proc told so.

A proc ships its log lines twice a second while someone watches them (`_instrument.LIVE_S`),
and once a second, with the rest of its telemetry, while nobody does
(`_instrument.UNWATCHED_LIVE_S`): each shipment costs the proc and the controller a fixed
~0.5 ms, paid per proc, and at 1,024 actors printing a line per call the slower pace made the
round ~9 % shorter (2026-12-08). Someone watches while a subscription to the store is open
(`monarch logs -f`, the admin API's `/v1/subscribe`, log forwarding to the client, an OTLP
exporter, an in-process `Store.subscribe`) or while the admin API served a request in the last
`ADMIN_WATCH_S` (a console polls it several times a second, `monarch status` once).

The watcher thread looks every `WATCH_S` (`Watched.look`); when the answer changes, every
proc with an address gets the notice ``telemetry_watched`` (`_instrument.WATCHED_NOTICE`, sent
on the loop), and a proc that starts while someone watches gets it as it starts
(`proc_started`): procs start unwatched.
"""

from __future__ import annotations

import math
import time
from typing import Any

from .._runtime._instrument import WATCHED_NOTICE
from ._supervisor import RUNNING, STARTING

ADMIN_WATCH_S = 5.0
"""How long after an admin API request the job counts as watched."""


class Watched:
    """The job's answer to "is anyone watching?", and the procs kept in step with it."""

    def __init__(self, job: Any) -> None:
        self._job = job
        self.watched = False
        """The answer the procs were last told (or are being told)."""

    def now(self) -> bool:
        """Whether someone watches now (see the module's docstring)."""
        job = self._job
        if job.store.followed():
            return True
        last = job.admin.last_request if job.admin is not None else -math.inf
        return time.monotonic() - last < ADMIN_WATCH_S

    def look(self) -> None:
        """Tells the procs when the answer changed (any thread: the telling runs on the
        loop, in the order of the changes)."""
        watched = self.now()
        if watched != self.watched:
            self.watched = watched
            self._job.runtime.call_soon(lambda: self._tell_all(watched))

    def _tell_all(self, watched: bool) -> None:
        body = {"watched": watched}
        for record in list(self._job.supervisor.procs.values()):
            if record.state in (STARTING, RUNNING) and record.address:
                self._job.runtime.notify(record.address, WATCHED_NOTICE, body)

    def proc_started(self, record: Any) -> None:
        """A proc announced its address (on the loop): it is told if someone watches."""
        if self.watched and record.address:
            self._job.runtime.notify(record.address, WATCHED_NOTICE, {"watched": True})
