"""The job's supervisor: what runs where, what failed, and who must be told.

It lives in the controller and is driven on the controller's I/O thread: forks and exits from
host agents, `ProcStarted` from procs, `actor_started`/`actor_failed` notices from hosting. A
failure is recorded (for the console and CLI), every process learns of dead procs, and each
affected mesh's owner gets a MeshFailure: `__supervise__` in its proc, or the root fault hook.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
import signal as _signal
import time
from typing import Any, Callable

from .._actors import _supervision
from .. import config
from .._geometry._extent import unravel
from .._runtime._errors import ActorError, actor_failure_report
from .._runtime._future import Future
from .._mesh._proc_mesh import STOPPED_REASON
from .._runtime._process_runtime import ProcessRuntime
from .._wire import _serial
from .._wire._messages import ProcStarted

STARTING, RUNNING, STOPPING, STOPPED, FAILED = "starting", "running", "stopping", "stopped", "failed"


@dataclasses.dataclass
class ProcRecord:
    """One proc of the job. Mutated on the controller's I/O thread only."""

    proc: str
    procs: str
    rank: int
    address: str
    host: str
    host_id: str = "local"
    """Which host agent spawned it: "local", or a worker's address."""
    pid: int | None = None
    state: str = STARTING
    status: int | None = None
    started: float = dataclasses.field(default_factory=time.time)
    meshes: set[str] = dataclasses.field(default_factory=set)
    owner: str = ""
    """The address of the process whose actor spawned the proc mesh (the controller's: root)."""
    owner_id: str = "root"
    """That actor's id: whose `__supervise__` hears of the proc's death when no actor ran on it."""
    bootstrapping: bool = False
    """Its proc mesh has a bootstrap, which has not returned yet (the proc is not ready)."""
    boot_error: tuple[Any, str] | None = None
    exit_waiting: int | None = None
    """Its exit status, while its end waits for its bootstrap_failed (see `proc_gone`)."""
    boot_failed_at: int = 0  # the order its bootstrap_failed arrived in: the first is reported
    """(exception, remote traceback) of its bootstrap, which raised: the proc then exits, and
    `ProcMesh.initialized` (not supervision) reports it."""


@dataclasses.dataclass
class MeshRecord:
    """One actor mesh of the job."""

    mesh: str
    name: str
    class_name: str
    owner: str
    owner_id: str
    procs: str
    ranks: dict[int, str] = dataclasses.field(default_factory=dict)
    """rank in the mesh -> proc hosting that actor."""
    labels: dict[int, str] = dataclasses.field(default_factory=dict)
    """rank in the mesh -> the actor's label, `<root>.<__main__.A a{'gpus': 0/2}>`."""
    states: dict[int, str] = dataclasses.field(default_factory=dict)
    """rank in the mesh -> running / failed / stopped."""
    coords: dict[int, dict[str, int]] = dataclasses.field(default_factory=dict)
    """rank in the mesh -> its coordinates in the mesh's extent."""
    extent: tuple[list[str], list[int]] = ([], [])
    """The mesh's (labels, sizes)."""


def _readiness(records: list[ProcRecord]) -> BaseException | bool | None:
    """Whether procs are ready (True), will never be (the error), or not yet (None)."""
    failed = [r for r in records if r.boot_error is not None]
    if failed:  # the first to arrive, so every observer hears the same failure
        record = min(failed, key=lambda r: r.boot_failed_at)
        if record.boot_error is not None:
            exception, remote_tb = record.boot_error
            err = ActorError(exception, f"The bootstrap of proc mesh {record.procs} failed on "
                                        f"proc {record.proc} (rank {record.rank}).")
            err.remote_traceback = remote_tb
            return err
    for record in records:
        if record.state in (STOPPING, STOPPED, FAILED):
            return RuntimeError(f"proc {record.proc} of proc mesh {record.procs} ended before "
                                f"it was ready ({record.state})")
    if all(r.state == RUNNING and not r.bootstrapping for r in records):
        return True
    return None


_ARRIVALS = itertools.count(1)

ATTRIBUTION_GRACE_S = 1.0
"""How long a dead proc's last notices (which actors it ran) may still be in flight (on a
loaded machine, a few hundred ms were seen). Only a proc with no actor known waits it, and
then also for the controller's inbox to be seen empty once (at most ATTRIBUTION_MAX_S)."""
ATTRIBUTION_MAX_S = 15.0

KEEP_ENDED = 4096
"""Ended procs (stopped or failed) whose records stay for the console, the CLI and late
notices; once `FORGET_STEP` more have ended, the oldest go, with the actor meshes all of
whose procs went (a job that spawns and stops meshes for days must not grow without bound)."""
FORGET_STEP = 256


class Supervisor:
    """Bookkeeping and failure routing for the whole job (controller I/O thread)."""

    def __init__(self, runtime: ProcessRuntime,
                 on_failure: Callable[[dict[str, Any]], None] = lambda failure: None,
                 on_started: Callable[[ProcRecord], None] = lambda record: None) -> None:
        self.runtime = runtime
        self._on_started = on_started
        self.procs: dict[str, ProcRecord] = {}
        self.by_pid: dict[int, str] = {}
        self.by_address: dict[str, str] = {}
        self.meshes: dict[str, MeshRecord] = {}
        self.failures: deque[dict[str, Any]] = deque(maxlen=KEEP_ENDED)
        """The job's failure reports, oldest first (the newest `KEEP_ENDED` kept for the
        console and CLI; every one is also in the store and the history)."""
        self._ended: deque[str] = deque()  # ended procs, oldest first
        self.on_mesh: Callable[[dict[str, Any]], None] = lambda body: None
        """Called (I/O thread) with each `actors_spawned` body: a new actor mesh."""
        self.on_forget: Callable[[set[str], set[str]], None] = lambda meshes, procs: None
        """Called (I/O thread) with the proc mesh ids all of whose records were forgotten,
        and the procs forgotten."""
        self._stop_waiters: list[tuple[set[str], Future[None]]] = []
        self.log_tail: Callable[[str, int], list[str]] = lambda proc, lines: []
        """The last lines a proc wrote (tail_log_lines of them go with its failure)."""
        self._on_failure = on_failure
        runtime.kind_handlers[ProcStarted] = lambda msg, frames: self.proc_started(msg)
        runtime.notice_handlers["actors_spawned"] = self.actors_spawned
        runtime.notice_handlers["actor_started"] = self.actor_started
        runtime.notice_handlers["actor_failed"] = self.actor_failed
        runtime.notice_handlers["actor_stopped"] = self.actor_stopped
        runtime.notice_handlers["bootstrapped"] = self.bootstrapped
        runtime.notice_handlers["bootstrap_failed"] = self.bootstrap_failed
        self._ready_waiters: list[tuple[list[ProcRecord], Future[bool]]] = []

    # -- procs -----------------------------------------------------------------------------
    def add_proc(self, record: ProcRecord) -> None:
        """Registers a proc about to be forked (remote ones learn their address later)."""
        self.procs[record.proc] = record
        if record.address:
            self.by_address[record.address] = record.proc

    def proc_forked(self, proc: str, pid: int) -> None:
        record = self.procs.get(proc)
        if record is not None:
            record.pid = pid
            self.by_pid[pid] = proc

    def proc_started(self, msg: ProcStarted) -> None:
        record = self.procs.get(msg.proc)
        if record is None:
            return
        if record.state == STARTING:
            record.state = RUNNING
        record.pid = msg.pid
        if not record.address:
            record.address = msg.address
            record.host = msg.hostname
            self.by_address[msg.address] = record.proc
            if msg.address in self.runtime.dead:
                self._reused(record)
            if self.runtime.dead:  # deaths it was not told of: it had no address then
                self.runtime.notify(msg.address, "procs_died", dict(self.runtime.dead))
        self._on_started(record)
        self._settle_ready()

    def proc_exited(self, pid: int, status: int) -> None:
        """A local proc (by pid) exited."""
        proc = self.by_pid.get(pid)
        record = self.procs.get(proc) if proc else None
        if record is not None and record.host_id == "local":
            self.proc_gone(record, status)

    def proc_gone_by_name(self, proc: str, status: int) -> None:
        """A proc (by id, e.g. reported by a remote worker) exited."""
        record = self.procs.get(proc)
        if record is not None:
            self.proc_gone(record, status)

    def proc_gone(self, record: ProcRecord, status: int, reason: str | None = None,
                  waited: bool = False) -> None:
        """Records a proc's end: expected (stopping) or a failure of everything on it."""
        if record.state in (STOPPED, FAILED):
            return
        if (record.bootstrapping and record.boot_error is None and status == 1
                and record.state != STOPPING and not waited):
            # Its bootstrap raised, most likely: it tells why (`bootstrap_failed`, which ends
            # it) just before it exits 1. Wait for the why, so `initialized` reports the
            # bootstrap's error and supervision hears nothing.
            if record.exit_waiting is None:
                record.exit_waiting = status
                self._after_last_notices(lambda: record.exit_waiting is None,
                                         lambda: self._end_after_wait(record))
            return
        record.exit_waiting = None
        record.status = status
        if record.state == STOPPING:
            record.state = STOPPED
            self._dead(record, STOPPED_REASON)
        elif record.boot_error is not None:  # reported by ProcMesh.initialized instead
            record.state = FAILED
            exc = record.boot_error[0]
            self._dead(record, f"the bootstrap of proc {record.proc} failed: "
                               f"{type(exc).__name__}: {exc}")
        else:
            record.state = FAILED
            self._proc_failed(record, reason or exit_reason(status))
        self._ended.append(record.proc)
        self._settle_stops()
        self._settle_ready()
        if len(self._ended) > KEEP_ENDED + FORGET_STEP:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """Drops the records of the oldest ended procs past `KEEP_ENDED`, and of the actor
        meshes left with none of their procs known."""
        gone: set[str] = set()
        procs: set[str] = set()
        while len(self._ended) > KEEP_ENDED:
            record = self.procs.pop(self._ended.popleft(), None)
            if record is None:
                continue
            gone.add(record.procs)
            procs.add(record.proc)
            if record.pid is not None and self.by_pid.get(record.pid) == record.proc:
                del self.by_pid[record.pid]
            if self.by_address.get(record.address) == record.proc:
                del self.by_address[record.address]
        gone -= {r.procs for r in self.procs.values()}  # proc meshes with a proc still known
        for mesh in [m for m, rec in self.meshes.items() if rec.procs in gone]:
            del self.meshes[mesh]
        self.on_forget(gone, procs)

    def lost_host(self, host_id: str, reason: str | None = None) -> None:
        """A host agent is gone (its zygote died, or its worker fell silent): so are its procs."""
        for record in list(self.procs.values()):
            if record.host_id == host_id and record.state not in (STOPPED, FAILED):
                self.proc_gone(record, -_signal.SIGKILL, reason)

    def stopping(self, procs: list[ProcRecord]) -> Future[None]:
        """Marks procs as stopping; the future settles once all of them have exited."""
        done: Future[None] = Future._pending()
        pending = set()
        for record in procs:
            if record.state not in (STOPPED, FAILED):
                record.state = STOPPING
                pending.add(record.proc)
        self._stop_waiters.append((pending, done))
        self._settle_stops()
        return done

    def _settle_stops(self) -> None:
        still = []
        for pending, done in self._stop_waiters:
            pending -= {p for p in pending
                        if p not in self.procs or self.procs[p].state in (STOPPED, FAILED)}
            if pending:
                still.append((pending, done))
            else:
                done.set_result(None)
        self._stop_waiters = still

    def _reused(self, record: ProcRecord) -> None:
        """A new proc listens where a dead one did (a tcp port the kernel handed out again):
        every process forgets that death, or the new proc would be refused as the old one."""
        self.runtime.revive(record.address)
        for other in self.procs.values():
            if (other.state in (STARTING, RUNNING, STOPPING) and other.address
                    and other is not record):
                self.runtime.notify(other.address, "address_reused", {"address": record.address})

    def _dead(self, record: ProcRecord, reason: str) -> None:
        if not record.address:  # a remote proc that never started
            return
        if self.by_address.get(record.address) != record.proc:
            return  # its address is a newer proc's already: its death must not speak for it
        self.runtime.mark_dead(record.address, reason)
        for other in self.procs.values():
            if (other.state in (STARTING, RUNNING, STOPPING) and other is not record
                    and other.address):  # a remote proc not started yet learns nothing
                self.runtime.notify(other.address, "proc_died",
                                    {"address": record.address, "reason": reason})

    def _proc_failed(self, record: ProcRecord, reason: str) -> None:
        self._dead(record, reason)
        where = _where(record)
        lines = config.get("tail_log_lines")
        if lines:
            where["log_tail"] = self.log_tail(record.proc, lines)
        if not self._fail_actors_on(record, reason, where):
            # No actor to blame yet: an `actor_started` it sent may still be in flight, so
            # look again before the proc mesh's owner hears instead.
            self._after_last_notices(lambda: self._fail_actors_on(record, reason, where),
                                     lambda: self._blame_proc(record, reason, where))

    def _after_last_notices(self, came: Callable[[], bool], then: Callable[[], None]) -> None:
        """Runs `then()` once a dead proc's last notices had time to arrive, unless `came()`
        says they did first. They travel on its link, its death on the agent's, so they may
        still be in flight (or queued behind a busy inbox): wait `ATTRIBUTION_GRACE_S`, then
        until the inbox was seen empty since, `ATTRIBUTION_MAX_S` at most."""
        mark, deadline = self.runtime.idle_polls, time.monotonic() + ATTRIBUTION_MAX_S

        def check() -> None:
            if came():
                return
            if self.runtime.idle_polls == mark and time.monotonic() < deadline:
                self.runtime.call_later(0.05, check)
                return
            then()

        self.runtime.call_later(ATTRIBUTION_GRACE_S, check)

    def _fail_actors_on(self, record: ProcRecord, reason: str, where: dict[str, Any]) -> bool:
        """Fails the live actors the dead proc ran (their owners hear); False if it ran none
        that was not stopped (a stopped actor cannot fail: the proc's death is the news)."""
        found = False
        for mesh in (self.meshes[m] for m in record.meshes if m in self.meshes):
            rank = next((r for r, p in mesh.ranks.items() if p == record.proc), None)
            if rank is None or mesh.states.get(rank) == STOPPED:
                continue
            found = True
            if mesh.states.get(rank) == FAILED:
                continue  # reported already
            mesh.states[rank] = FAILED
            self._failure({
                "mesh": mesh.mesh, "mesh_name": mesh.name, "rank": rank,
                "class_name": mesh.class_name, "owner": mesh.owner, "owner_id": mesh.owner_id,
                "label": mesh.labels[rank], **where, "reason": reason,
                "report": actor_failure_report(mesh.labels[rank], reason)})
        return found

    def _blame_proc(self, record: ProcRecord, reason: str, where: dict[str, Any]) -> None:
        self._failure({  # the proc mesh's owner hears
            "mesh": record.procs, "mesh_name": record.procs, "rank": record.rank,
            "class_name": None, "owner": record.owner or self.runtime.address,
            "owner_id": record.owner_id,
            **where, "reason": reason,
            "report": f"The proc {record.proc} of proc mesh {record.procs} has failed:\n"
                      f"  {reason}"})

    def _end_after_wait(self, record: ProcRecord) -> None:
        status = record.exit_waiting
        if status is not None:
            self.proc_gone(record, status, waited=True)

    # -- readiness (ProcMesh.initialized) ------------------------------------------------------
    def bootstrapped(self, body: dict[str, Any]) -> None:
        record = self.procs.get(body["proc"])
        if record is not None:
            record.bootstrapping = False
            self._settle_ready()

    def bootstrap_failed(self, body: dict[str, Any]) -> None:
        record = self.procs.get(body["proc"])
        if record is not None:
            record.boot_error = _serial.loads(body["error"])
            record.boot_failed_at = next(_ARRIVALS)
            if record.exit_waiting is not None:  # its exit came first: it ends now
                self.proc_gone(record, record.exit_waiting)
            self._settle_ready()

    def ready(self, procs: str, ranks: list[int]) -> Future[bool]:
        """True once those procs of a proc mesh started and ran its bootstrap; fails with the
        bootstrap's ActorError, or a RuntimeError if a proc ended first. A mesh unknown here
        (the controller's own process) is ready."""
        records = [self.procs[f"{procs}-{r}"] for r in ranks if f"{procs}-{r}" in self.procs]
        done: Future[bool] = Future._pending()
        self._ready_waiters.append((records, done))
        self._settle_ready()
        return done

    def _settle_ready(self) -> None:
        still = []
        for records, done in self._ready_waiters:
            outcome = _readiness(records)
            if outcome is None:
                still.append((records, done))
            elif isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(True)
        self._ready_waiters = still

    # -- actors ----------------------------------------------------------------------------
    def _mesh(self, body: dict[str, Any]) -> MeshRecord:
        mesh = self.meshes.get(body["mesh"])
        if mesh is None:
            mesh = self.meshes[body["mesh"]] = MeshRecord(
                body["mesh"], body["name"], body["class_name"], body["owner"],
                body["owner_id"], body["procs"])
        return mesh

    def actors_spawned(self, body: dict[str, Any]) -> None:
        """The spawner's word of a new mesh: which proc runs each rank (they are starting)."""
        mesh = self._mesh(body)
        self.on_mesh(body)
        labels = body["labels"]
        mesh.extent = (labels, body["sizes"])
        for rank, proc, label in body["actors"]:
            if rank in mesh.states:
                continue  # its proc's own notice came first
            mesh.ranks[rank], mesh.labels[rank], mesh.states[rank] = proc, label, STARTING
            mesh.coords[rank] = dict(zip(labels, unravel(rank, body["sizes"])))
            record = self.procs.get(proc)
            if record is not None:
                record.meshes.add(body["mesh"])

    def actor_started(self, body: dict[str, Any]) -> None:
        mesh = self._mesh(body)
        mesh.ranks[body["rank"]] = body["proc"]
        mesh.labels[body["rank"]] = body["label"]
        mesh.states[body["rank"]] = RUNNING
        mesh.coords[body["rank"]] = body.get("coords", {})
        mesh.extent = (body.get("labels", []), body.get("sizes", []))
        record = self.procs.get(body["proc"])
        if record is not None:
            record.meshes.add(body["mesh"])

    def actor_failed(self, body: dict[str, Any]) -> None:
        self.runtime.failed_actors.setdefault((body["mesh"], body["base_rank"]), body["report"])
        mesh = self.meshes.get(body["mesh"])
        if mesh is not None:
            mesh.states[body["rank"]] = FAILED
        self._failure(body)

    def actor_stopped(self, body: dict[str, Any]) -> None:
        mesh = self.meshes.get(body["mesh"])
        if mesh is not None and mesh.states.get(body["rank"]) == RUNNING:
            mesh.states[body["rank"]] = STOPPED

    def _failure(self, failure: dict[str, Any]) -> None:
        failure = dict(failure, time=time.time())
        self.failures.append(failure)
        self._on_failure(failure)
        if failure["owner_id"] == "root":
            _supervision.dispatch_root(_supervision.MeshFailure(failure))
        elif not failure.get("owner_told"):  # a failing actor tells its owner itself
            self.runtime.notify(failure["owner"], "supervise", failure)


def _where(record: ProcRecord) -> dict[str, Any]:
    """Where a failed proc ran and how it ended (exit code, or the killing signal)."""
    status = record.status or 0
    return {"proc": record.proc, "host": record.host, "pid": record.pid,
            "exit_code": status if status >= 0 else None,
            "signal": -status if status < 0 else None}


def exit_reason(status: int) -> str:
    """Monarch's words for how a proc ended (`Killed(sig=9)`, `non-zero code 1`)."""
    if status < 0:
        return f"the process this actor was running on failed: Killed(sig={-status})"
    if status == 0:
        return "the process this actor was running on exited unexpectedly with code 0"
    return f"the process this actor was running on exited with non-zero code {status}"
