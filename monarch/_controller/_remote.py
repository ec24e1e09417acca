"""Remote hosts: the host workers this controller attached to, kept alive by heartbeats.

A worker that falls silent for `SILENCE_S` is a lost host: every proc the job had there fails
(a supervision event), exactly as if each had been killed.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any

from .._runtime._future import Future
from .._host.worker import HEARTBEAT_S, SILENCE_S, OwnGaps, Swamped
from .._wire._messages import ProcExited
from .._wire._transport import is_private


@dataclasses.dataclass
class WorkerRecord:
    """One attached host worker."""

    address: str
    hostname: str = ""
    bind_host: str = ""
    heard: float = dataclasses.field(default_factory=time.monotonic)
    lost: bool = False


class Workers:
    """The job's attached workers (controller loop thread only)."""

    def __init__(self, job: Any) -> None:
        self.job = job
        self.runtime = job.runtime
        self.hosts: dict[str, WorkerRecord] = {}
        self._waiting: list[tuple[set[str], Future[None]]] = []
        self._ticking = False
        self._gaps = OwnGaps()
        self._swamped = Swamped()
        self.runtime.notice_handlers["worker_attached"] = self._attached
        self.runtime.notice_handlers["worker_heartbeat"] = self._heard
        self.runtime.kind_handlers[ProcExited] = lambda msg, frames: self._exited(msg)

    def attach(self, addresses: list[str], secret: bytes, timeout: float = 30.0) -> Future[None]:
        """Attaches to workers; the future settles once every one has answered."""
        self._listen_tcp(addresses)
        done: Future[None] = Future._pending()
        pending = set()
        for address in addresses:
            record = self.hosts.get(address)
            if record is not None and record.hostname and not record.lost:
                continue
            if record is not None:  # an earlier attempt (refused, unanswered) or a lost host:
                self.runtime.outbox.forget(address)  # its link keeps the old credentials
            self.hosts[address] = WorkerRecord(address)
            self.runtime.outbox.credentials[address] = secret
            # renew: a host declared lost may still run what it ran for us (it was paused,
            # or cut off): the worker ends that first, the job counts it dead already
            self.runtime.notify(address, "attach", {
                "controller": self.runtime.address, "secret": self.runtime.identity.secret,
                "job": self.runtime.identity.job_id, "worker": address,
                "renew": record is not None and record.lost})
            pending.add(address)
        self._waiting.append((pending, done))
        self._settle()
        self.runtime.call_later(timeout, lambda: self._expire(pending, done, timeout))
        if not self._ticking:
            self._ticking, self._gaps = True, OwnGaps()
            self.runtime.call_later(HEARTBEAT_S, self._tick)
        return done

    def fork(self, address: str, procs: list[tuple[str, dict[str, Any]]]) -> None:
        """Asks the worker at `address` to fork procs (their configs lack the address)."""
        self.runtime.notify(address, "fork", {"procs": procs})

    def signal(self, address: str, pid: int, sig: int) -> None:
        """Sends `sig` to a proc the worker at `address` forked."""
        self.runtime.notify(address, "signal", {"pid": pid, "sig": sig})

    def shutdown(self) -> None:
        """Tells every worker the job is over (they kill what is left of it)."""
        for record in self.hosts.values():
            if not record.lost:
                self.runtime.notify(record.address, "shutdown",
                                    {"controller": self.runtime.address})

    def release(self, addresses: list[str]) -> None:
        """Detaches from these workers (they end what is left of this job there)."""
        for address in addresses:
            record = self.hosts.pop(address, None)
            if record is not None and not record.lost:
                self.runtime.notify(address, "shutdown", {"controller": self.runtime.address})

    def end(self, addresses: list[str]) -> None:
        """Tells those workers to end (their procs, then themselves): `HostMesh.shutdown`."""
        for address in addresses:
            record = self.hosts.pop(address, None)
            if record is not None and not record.lost:
                self.runtime.notify(address, "exit", {"controller": self.runtime.address})

    def bind_host(self, address: str) -> str:
        """Where procs on that worker's host listen."""
        return self.hosts[address].bind_host

    def _listen_tcp(self, addresses: list[str]) -> None:
        if self.runtime.address.startswith("tcp://"):
            return
        loopback = all(is_private(a) for a in addresses)
        host = "127.0.0.1" if loopback else os.environ.get(
            "MONARCH_BIND_HOST", socket.gethostbyname(socket.gethostname()))
        self.runtime.listen_tcp(host)

    def _attached(self, body: dict[str, Any]) -> None:
        record = self.hosts.get(body["worker"])
        if record is None:
            return
        record.hostname, record.bind_host = body["hostname"], body["bind_host"]
        record.heard = time.monotonic()
        self._settle()

    def _heard(self, body: dict[str, Any]) -> None:
        record = self.hosts.get(body["worker"])
        if record is None:
            return
        if record.lost:  # it comes back from a pause or a partition: too late, its procs
            self.runtime.notify(record.address, "lost", {  # are dead to this job
                "controller": self.runtime.address,
                "why": f"the controller had no heartbeat from it for {SILENCE_S:.0f} s"})
            return
        record.heard = time.monotonic()

    def _exited(self, msg: ProcExited) -> None:
        self.job.supervisor.proc_gone_by_name(msg.proc, msg.status)

    def _settle(self) -> None:
        still = []
        for pending, done in self._waiting:
            pending -= {a for a in pending if a not in self.hosts or self.hosts[a].hostname}
            if pending:
                still.append((pending, done))
            else:
                done.set_result(None)
        self._waiting = still

    def _expire(self, pending: set[str], done: Future[None], timeout: float) -> None:
        if pending and not done.done():
            done.set_exception(RuntimeError(
                f"attach failed: config push failed during attach: no answer within "
                f"{timeout:g}s from the workers at {sorted(pending)}: are they running, and "
                "do they share this job's worker secret (MONARCH_WORKER_SECRET, or "
                "ca='trust_all_connections' on both sides)?"))

    def _forget_lost(self) -> None:
        lost = [address for address, record in self.hosts.items() if record.lost]
        for address in lost[:max(len(lost) - KEEP_LOST, 0)]:  # oldest first (dict order)
            del self.hosts[address]

    def _tick(self) -> None:
        now = time.monotonic()
        resumed = self._gaps.resumed(now) or self._swamped.postpones(now, any(
            now - r.heard > SILENCE_S for r in self.hosts.values() if r.hostname and not r.lost))
        for record in list(self.hosts.values()):  # `_forget_lost` may delete from it
            if record.lost or not record.hostname:
                continue
            if resumed:
                record.heard = max(record.heard, now)
            elif now - record.heard > SILENCE_S:
                record.lost = True
                self.job.supervisor.lost_host(
                    record.address, f"the host {record.hostname} ({record.address}) was lost: "
                                    f"no heartbeat for {SILENCE_S:.0f} s")
                # its socket goes (a job that replaces hosts for days kept one per host
                # lost); a lost worker heard again gets a fresh link for its `lost` notice
                self.runtime.outbox.forget(record.address)
                self._forget_lost()
                continue
            # a late tick still beats, as the worker's does
            self.runtime.notify(record.address, "heartbeat", {"controller": self.runtime.address})
        if not self.runtime._closing:
            self.runtime.call_later(HEARTBEAT_S, self._tick)


KEEP_LOST = 1024
"""Records of lost hosts kept (to tell one that comes back it was lost); the oldest go."""


def attach_to_workers(workers: list[Any], name: str | None = None,
                      timeout: float | None = None, secret: bytes | None = None,
                      lazy: bool = False) -> Any:
    """A HostMesh (`hosts` dimension) over running workers; see `monarch.actor`. `secret`:
    the workers' secret (default: MONARCH_WORKER_SECRET[_FILE]); `timeout`: how long each
    worker may take to answer (default: the `mesh_attach_config_timeout` knob). With `lazy`,
    returns at once: `initialized` and `spawn_procs` wait for the attach (and raise its
    RuntimeError); otherwise it is waited for here."""
    from .. import config
    from .._runtime._context import root
    from .._host.worker import split_alias, worker_secret
    from .._mesh._host_mesh import HostMesh
    from .._runtime._controller_calls import call
    from .._geometry._view import View

    root()  # this process becomes the controller, if it is not yet
    wait = config.seconds("mesh_attach_config_timeout") if timeout is None else timeout
    addresses = [split_alias(w.get(timeout=60) if isinstance(w, Future) else str(w))[0]
                 for w in workers]  # an alias (DIAL@BIND) is known by what it dials
    if not addresses:
        raise ValueError("attach_to_workers needs at least one worker address")
    attached = call("attach_workers", addresses, secret or worker_secret(), wait)
    view = View.dense(["hosts"], [len(addresses)])
    name = "hosts" if name is None else name
    if not isinstance(name, str) or not name:
        raise ValueError(f"attach_to_workers: name must be a non-empty str, got {name!r}")
    if not lazy:
        attached.get(timeout=wait + 60)
        return HostMesh(hosts=tuple(addresses), full=view, view=view, name=name)
    return HostMesh(hosts=tuple(addresses), full=view, view=view, attached=attached, name=name)
