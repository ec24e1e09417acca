"""The job: what the controller process starts on first use, and stops at exit.

`ensure_job()` makes this process the controller: a per-job secret and private run directory,
the process runtime, the local host agent (zygote), the supervisor, the services other
processes call, and the root context. `Job.shutdown()` (also at interpreter exit) stops every
proc, ends the zygote and removes the run directory.
"""

from __future__ import annotations

import atexit
import gc
import math
import os
import secrets
import signal
import socket
import sys
import threading
import time
from typing import Any

from .._actors import _system_agent as _agent, _supervision
from .._runtime import _future, _instrument, _malloc, _process_runtime as _process
from .._runtime import _controller_calls as _services
from .. import config, telemetry
from .._runtime._context import Context, Instance, install_log_prefix, set_root
from .._runtime._settings import follow_settings, proc_settings
from .._runtime._future import Future, when_all
from .._host._agent import HostAgent, Started
from .._mesh._host_mesh import LOCAL_HOST, local_host_mesh
from .._runtime._identity import ProcessIdentity, set_current_process
from .._mesh._proc_mesh import ProcMesh
from .._runtime._process_runtime import ProcessRuntime
from .._rdma._segments import sweep_job as sweep_rdma_segments
from .._runtime._rundir import claim, ipc_endpoint, release, run_root, sweep_dead
from .._geometry._view import Extent, Point, View
from ..telemetry._budget import DEFAULT_MB, Budget
from ..telemetry._recorder import recovered_batch
from .._wire import _serial
from .._wire._switch import number, switch
from .._wire._messages import ERROR, OK, Call, Telemetry
from ._admin import start_admin
from . import _admin_views as views
from .._history._runs import enabled as history_enabled
from .._history._runs import history_dir, prune_limits
from ._admin import parse_addr
from ._exporters import metrics_port, start_exporters
from ._history_writer import DEFAULT_HISTORY_MB, Watcher
from ._logstream import LogStreamer
from ._watched import Watched
from ._remote import Workers
from ._supervisor import RUNNING, STARTING, STOPPING, ProcRecord, Supervisor

FLUSH_WAIT_S = 3.0
"""How long logging_option waits for a proc to ship what it wrote before the mode changes."""
FINAL_TELEMETRY_S = 1.0
"""How long a stop waits, after a proc exited, for a last telemetry that has not come."""

_job: "Job | None" = None
_lock = threading.Lock()


CONTROLLER_GC_GEN0 = 2_000
"""Allocations between two young collections in a controller (Python's default: 700),
unless MONARCH_CONTROLLER_GC_GEN0 says otherwise or the script set its own threshold."""


def _space_young_collections(gen0: int) -> None:
    """Young collections every `gen0` allocations instead of Python's 700, unless the script
    changed the threshold itself: at 1,024 busy actors the job's threads (the replies and
    telemetry they decode, the store's records) made the collector take ~40 % of the
    controller's CPU (DESIGN.md, "Processes")."""
    current, gen1, gen2 = gc.get_threshold()
    if current == 700:
        gc.set_threshold(gen0, gen1, gen2)


def ensure_job(zygote: Started | None = None) -> "Job":
    """Returns this process's job, starting it (this process becomes the controller); its
    local host agent takes `zygote` (started ahead, `_host._agent.start_zygote`), which is let
    go of when the job runs already or does not start."""
    global _job
    with _lock:
        if _job is None:
            try:
                _job = Job(zygote)
                zygote = None
            finally:
                if zygote is not None:
                    zygote.close()
        elif zygote is not None:
            zygote.close()
        return _job


def current_job() -> "Job | None":
    """The running job, if this process is its controller."""
    return _job


class Job:
    """The controller's job-level state. Created by `ensure_job`."""

    def __init__(self, zygote: Started | None = None) -> None:
        # settings first: one that does not read stops the job before it made anything
        budget = Budget.from_mb(number("MONARCH_TELEMETRY_MB", DEFAULT_MB, above=True))
        _malloc.limit_arenas()  # before the job's threads start (see `_runtime._malloc`)
        _malloc.arrow_on_malloc()  # before the history writer imports pyarrow
        self.stall_s = _stall_s()
        """A handler running longer than this many seconds is stalled (MONARCH_STALL_S)."""
        history_mb = number("MONARCH_HISTORY_MB", DEFAULT_HISTORY_MB, above=True)
        history_on = history_enabled()
        self.prune_limits = prune_limits()
        metrics_port()  # these are read again as they start; a typo stops the job here
        switch("MONARCH_PROC_BATCH_SCHED")  # read by each proc (`_proc._main`)
        gc_gen0 = int(number("MONARCH_CONTROLLER_GC_GEN0", CONTROLLER_GC_GEN0, minimum=1,
                             integer=True))
        parse_addr(os.environ.get("MONARCH_ADMIN_ADDR", ""))
        self.job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        self.started = time.time()
        root = run_root()
        sweep_dead(root)
        self.run_dir = root / self.job_id
        self.run_dir.mkdir(mode=0o700)
        claim(self.run_dir)
        self.hostname = socket.gethostname()
        self.identity = ProcessIdentity(job_id=self.job_id, secret=os.urandom(32),
                                        run_dir=self.run_dir, name="controller",
                                        hostname=self.hostname)
        set_current_process(self.identity)
        self.runtime = ProcessRuntime(self.identity, ipc_endpoint(self.run_dir, "ctl"))
        _process.set_current(self.runtime)
        self.runtime.learn_table("ctl", (self.runtime.address,))
        self.store = telemetry.Store(budget=budget)
        self.watched = Watched(self)
        """Whether anyone watches the job live (the procs' pace of log lines, `_watched`)."""
        self.supervisor = Supervisor(self.runtime, on_failure=self._record_failure,
                                     on_started=self._proc_started)
        self.supervisor.log_tail = self._log_tail
        self.supervisor.on_forget = self._forget
        self.supervisor.on_mesh = self._actor_mesh_spawned
        started = time.time_ns()
        for event in ("created", "client"):  # the root actor: this script's client
            self.store.add_event(telemetry.StatusEvent(started, "root", "client", 0, event,
                                                       "", "controller"))
        self.workers = Workers(self)
        self._spawning: dict[str, tuple[list[ProcRecord], Future[Any]]] = {}
        self._abandoned: set[str] = set()
        """Remote proc meshes whose spawn timed out (a late proc of theirs is stopped)."""
        self.proc_extents: dict[str, tuple[list[str], list[int]]] = {}
        """Proc mesh id -> its (labels, sizes), for the admin API (I/O thread)."""
        self.telemetry_enabled = _instrument.enabled_by_default()
        self.agent = self._local_agent(zygote)
        """This host's agent: its zygote forks the job's local procs."""
        self.output_relay = zygote.relay if zygote is not None else None
        """What brings the local procs' stdout and stderr to ours (`_host._output_relay`)."""
        if self.output_relay is not None:
            _future.before_result = self.output_relay.drain  # lines before the answers
        if zygote is not None:
            self.agent.start()  # takes the zygote started ahead (closed with the agent)
        self.host_mesh = local_host_mesh(LOCAL_HOST)
        view = View.dense([], [])
        self.proc_mesh = ProcMesh(procs="ctl", table=(self.runtime.address,), full=view,
                                  view=view, host_mesh=self.host_mesh)
        self.singletons: dict[str, Any] = {}
        self.log_streamer = LogStreamer(
            self.store, history_dir(self.job_id) if history_on else self.run_dir)
        self._preloaded: set[str] = set()
        self._shut = False
        self._first_ready = False
        self._install()
        set_root(Context(Instance(
            actor_id="root", name="root", class_name="root", rank=Point(0, Extent([], [])),
            proc_id="controller", creator=None, sender="root",
            proc_mesh=lambda: self.proc_mesh)))
        self.runtime.kind_handlers[Telemetry] = lambda msg, frames: self.store.ingest(msg.batch)
        self._final_telemetry: set[str] = set()
        """Procs whose last telemetry arrived (I/O thread)."""
        self.runtime.notice_handlers[_instrument.FINAL_NOTICE] = (
            lambda body: self._final_telemetry.add(str(body.get("proc"))))
        self._flushes: dict[str, list[Any]] = {}
        """logging_option's waits: token -> [procs yet to answer, what starts the change]."""
        self.runtime.notice_handlers["output_flushed"] = self._output_flushed
        self.runtime.notice_handlers[_instrument.RECOVERED_NOTICE] = (
            lambda body: self._ingest_when_idle(body["batch"]))
        self.exit_code, self.exit_reason = 0, ""
        """How the script ended, for its history (`monarch jobs`): see `_record_exit`."""
        self._record_exit()
        _supervision.prepare_main_interrupt()  # a fault ends the script even if SIGINT is ignored
        install_log_prefix()
        _instrument.start_process(self.runtime, enabled=self.telemetry_enabled, ship_to=None,
                                  ingest=self.store.ingest, capture=False)
        follow_settings(self.runtime)
        self.runtime.start()
        self.exporters = start_exporters(self)
        self.admin = start_admin(self)
        self.watcher = Watcher(self, self.stall_s, self._topology).start(history_on,
                                                                    int(history_mb * 1e6))
        atexit.register(self.shutdown)
        _space_young_collections(gc_gen0)

    def _actor_mesh_spawned(self, body: dict[str, Any]) -> None:
        """Records a new actor mesh in the store (from its spawner's `actors_spawned`)."""
        view = body.get("view")
        parent_view = None
        if view is not None:
            labels, offset, sizes, strides = view
            parent_view = (tuple(labels), int(offset), tuple(sizes), tuple(strides))
        self.store.meshbook.add_mesh(telemetry.MeshEvent(
            time.time_ns(), body["mesh"], "actor", body["name"], body["class_name"],
            tuple(body["labels"]), tuple(body["sizes"]), body["procs"], parent_view,
            tuple((rank, proc, label) for rank, proc, label in body["actors"])))

    def _forget(self, proc_meshes: set[str], procs: set[str]) -> None:
        """What the job kept of procs and proc meshes the supervisor forgot (I/O thread)."""
        for procs_id in proc_meshes:
            self.proc_extents.pop(procs_id, None)
            self._abandoned.discard(procs_id)
            self.log_streamer.forget(procs_id)
        self._final_telemetry -= procs

    def _topology(self) -> dict[str, Any]:
        """The admin API's topology (from any thread but the I/O thread)."""
        return views.topology(self._on_io(views.snapshot)(self).get(timeout=5), self.store)

    def _local_agent(self, zygote: Started | None = None) -> HostAgent:
        return HostAgent(
            on_fork=lambda proc, pid: self.runtime.call_soon(
                lambda: self.supervisor.proc_forked(proc, pid)),
            on_exit=lambda pid, status: self.runtime.call_soon(
                lambda: self._local_proc_exited(pid, status)),
            on_lost=lambda: self.runtime.call_soon(
                lambda: self.supervisor.lost_host(LOCAL_HOST)), started=zygote)

    def _record_exit(self) -> None:
        """Chains `sys.excepthook`: an uncaught exception ends the script with status 1 (130
        for a KeyboardInterrupt, the default fault hook's included), and its history says why.
        Without one the script ends with 0 (a `sys.exit(n)` is not seen: Python hands its
        code to no hook)."""
        previous = sys.excepthook

        def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            if self.exit_code == 0:
                self.exit_code = 130 if issubclass(kind, KeyboardInterrupt) else 1
                text = str(value).strip().splitlines()
                self.exit_reason = f"{kind.__name__}: {text[0]}" if text else kind.__name__
                cause = getattr(value, "exception", None)  # an ActorError: the remote one
                if isinstance(cause, BaseException):
                    self.exit_reason += f" ({type(cause).__name__}: {cause})"
                if issubclass(kind, KeyboardInterrupt) and _supervision.last_unhandled:
                    self.exit_reason = ("unhandled monarch error: "
                                        + _supervision.last_unhandled.splitlines()[0])
            previous(kind, value, tb)

        sys.excepthook = hook

    def _local_proc_exited(self, pid: int, status: int) -> None:
        """A proc of this host ended (I/O thread): what it had not shipped first, if it died."""
        proc = self.supervisor.by_pid.get(pid)
        try:
            if status != 0 and proc is not None:
                batch = recovered_batch(str(_instrument.crash_stem(self.run_dir, proc)), {
                    "host": self.hostname, "proc": proc, "pid": pid, "job": self.job_id})
                if batch is not None:
                    self._ingest_when_idle(batch)
        except Exception as exc:  # noqa: BLE001 - what was lost stays lost; the exit counts
            print(f"monarch: the records of dead proc {proc} not recovered: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            self.supervisor.proc_exited(pid, status)

    def _ingest_when_idle(self, batch: Any) -> None:
        """Ingests what a dead proc's crash files held once the inbox was seen empty (I/O
        thread): its last shipments, in flight at its death, are in the store by then, and the
        store keeps of the files only what it lacks."""
        mark, deadline = self.runtime.idle_polls, time.monotonic() + 15

        def check() -> None:
            if self.runtime.idle_polls == mark and time.monotonic() < deadline:
                self.runtime.call_later(0.05, check)
                return
            self.store.ingest(batch)

        check()

    def _record_failure(self, failure: dict[str, Any]) -> None:
        infrastructure = "exit_code" in failure or "signal" in failure  # a proc or host ended
        if infrastructure and self.telemetry_enabled:
            telemetry.process_recorder().metrics.inc(("job_failures", "infrastructure"))
        rank = failure.get("rank")
        self.store.add_event(telemetry.StatusEvent(
            int(failure["time"] * 1e9), f"{failure.get('mesh', '')}[{rank}]",
            failure.get("mesh_name", ""), rank, "failed", failure.get("reason", ""),
            failure.get("proc") or ""))
        self.store.add(telemetry.FailureRecord(
            failure.get("mesh_name", ""), failure.get("rank"), failure.get("class_name") or "",
            failure.get("host") or "", failure.get("pid") or 0, failure.get("exit_code"),
            failure.get("signal"), failure.get("report", ""), failure.get("reason", ""),
            int(failure["time"] * 1e9), failure.get("proc") or ""))

    def _install(self) -> None:
        runtime = self.runtime
        _agent.install(runtime, lambda: self.proc_mesh)
        services = {"spawn_procs": self.spawn_procs, "stop_procs": self.stop_procs,
                    "get_or_spawn": self.get_or_spawn, "logging_option": self.logging_option,
                    "shutdown_hosts": self.shutdown_hosts,
                    "proc_mesh_ready": self.supervisor.ready, "live_procs": self.live_procs,
                    "detach_workers": self.detach_workers, "end_workers": self.end_workers,
                    "attach_workers": self.workers.attach}
        for name, fn in services.items():
            _services.register(name, self._on_io(fn))
            runtime.system_methods[name] = self._service_method(fn)

    def _on_io(self, fn: Any) -> Any:
        """Wraps a service so that it always runs on the I/O thread (it mutates the supervisor)."""
        def call(*args: Any) -> Future[Any]:
            out: Future[Any] = Future._pending()

            def run() -> None:
                try:
                    result = fn(*args)
                except Exception as exc:  # noqa: BLE001 - delivered through the future
                    out.set_exception(exc)
                    return
                if isinstance(result, Future):
                    result.add_done_callback(lambda: _copy(result, out))
                else:
                    out.set_result(result)

            if self.runtime.on_io_thread():
                run()
            else:
                self.runtime.call_soon(run)
            return out

        return call

    def _service_method(self, fn: Any) -> Any:
        """A service as a system method other processes call (see `_services.call`)."""
        def handle(msg: Call, frames: list[Any]) -> None:
            args = _serial.loads(frames[0].buffer, [f.buffer for f in frames[1:]])
            future = self._on_io(fn)(*args)
            future.add_done_callback(lambda: self._answer(msg, future))

        return handle

    def _answer(self, msg: Call, future: Future[Any]) -> None:
        if msg.port is None:
            return
        try:
            value = future.get()
            status, payload = OK, value
        except Exception as exc:  # noqa: BLE001 - sent to the caller
            status, payload = ERROR, (exc, "")
        data, buffers = _serial.dumps(payload)
        self.runtime.reply(msg.port, msg.lo, status, [data, *buffers])

    # -- services (I/O thread) -------------------------------------------------------------
    def spawn_procs(self, hosts: list[str], labels: list[str], sizes: list[int],
                    name: str | None, bootstrap: Any, owner_id: str = "root",
                    owner: str = "", launches: list[dict[str, Any] | None] | None = None,
                    binds: list[dict[str, str]] | None = None,
                    host_launch: dict[str, Any] | None = None,
                    host_mesh: tuple | None = None) -> Any:
        """Starts a proc mesh: `launches` (per rank) are bootstrap commands, `binds` (per proc
        of a host) CPU/NUMA pinnings, `host_launch` the command the procs' own `this_host()`
        starts procs with. Returns (procs, table), or a future of it for other hosts."""
        unknown = [h for h in hosts if h != LOCAL_HOST and h not in self.workers.hosts]
        if unknown:
            raise ValueError(f"unknown hosts {unknown}: this job has no agent there")
        follow_settings(self.runtime)  # knobs set since the job started count from now on
        procs = f"{name or 'procs'}-{secrets.token_hex(3)}"
        self.log_streamer.add_mesh(procs, config.get("enable_log_forwarding"),
                                   config.get("enable_file_capture"))
        self.proc_extents[procs] = (list(labels), list(sizes))
        self._record_meshes(procs, name or "procs", labels, sizes, hosts, host_mesh)
        count = 1
        for size in sizes:
            count *= size
        per_host = count // len(hosts)
        tcp_host = self._tcp_host()
        local = tcp_host is None and all(h == LOCAL_HOST for h in hosts)
        table = [ipc_endpoint(self.run_dir, f"{procs}-{rank}")
                 if hosts[rank // per_host] == LOCAL_HOST and tcp_host is None else ""
                 for rank in range(count)]
        boot = _serial.dumps(bootstrap)[0] if bootstrap is not None else None
        records = []
        remote: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for rank in range(count):
            host, proc = hosts[rank // per_host], f"{procs}-{rank}"
            record = ProcRecord(proc, procs, rank, table[rank],
                                self.hostname if host == LOCAL_HOST else "", host_id=host,
                                owner=owner or self.runtime.address, owner_id=owner_id,
                                bootstrapping=boot is not None)
            self.supervisor.add_proc(record)
            records.append(record)
            proc_config = self._proc_config(proc, procs, rank, labels, sizes,
                                            table if local else None, boot)
            proc_config.update(launch=launches[rank] if launches else None,
                               bind=binds[rank % per_host] if binds else None,
                               host_launch=host_launch)
            if host == LOCAL_HOST:
                address = table[rank] or f"tcp://{tcp_host}:0"
                self.agent.fork(proc, dict(proc_config, address=address))
            else:  # a remote proc keeps its node's environment (Slurm's variables and all)
                remote.setdefault(host, []).append((proc, dict(proc_config, env=None)))
        for host, batch in remote.items():
            self.workers.fork(host, batch)
        self._maybe_preload()
        if local:
            return procs, table
        done: Future[Any] = Future._pending()
        self._spawning[procs] = (records, done)
        self._spawn_deadline(procs, "host_spawn_ready_timeout", 0)
        return done

    def _record_meshes(self, procs: str, name: str, labels: list[str], sizes: list[int],
                       hosts: list[str], host_mesh: tuple | None) -> None:
        """Records the new proc mesh, and the host mesh it was spawned on, in the store
        (Monarch's `meshes` table: `monarch.job.TelemetryConfig`)."""
        now = time.time_ns()
        count = math.prod(sizes)
        parent, parent_view = "", None
        if host_mesh is not None:
            mesh_id, host_name, host_labels, host_sizes, view = host_mesh
            self.store.meshbook.add_mesh(telemetry.MeshEvent(
                now, mesh_id, "host", host_name, "", tuple(host_labels), tuple(host_sizes),
                actors=tuple((rank, host) for rank, host in enumerate(hosts))))
            view_labels, view_sizes, view_strides, offset = view
            parent, parent_view = mesh_id, (tuple(view_labels), int(offset),
                                            tuple(view_sizes), tuple(view_strides))
        self.store.meshbook.add_mesh(telemetry.MeshEvent(
            now, procs, "proc", name, "", tuple(labels), tuple(sizes), parent, parent_view,
            tuple((rank, f"{procs}-{rank}") for rank in range(count))))

    def _spawn_deadline(self, procs: str, knob: str, announced: int) -> None:
        """Fails a remote proc mesh's spawn that made no progress for `knob`'s duration (the
        hosts' first procs: host_spawn_ready_timeout; each further one:
        mesh_proc_spawn_max_idle): its missing procs fail (their owner hears), the started
        ones stop."""

        def expire() -> None:
            pending = self._spawning.get(procs)
            if pending is None:
                return
            records, done = pending
            now = sum(1 for r in records if r.address)
            if now != announced:  # progress: the idle clock starts over
                self._spawn_deadline(procs, "mesh_proc_spawn_max_idle", now)
                return
            del self._spawning[procs]
            self._abandoned.add(procs)
            missing = [r for r in records if not r.address]
            where = sorted({r.host_id for r in missing})
            reason = (f"proc mesh {procs}: {len(missing)} of {len(records)} procs (on "
                      f"{', '.join(where)}) did not start within {knob}="
                      f"{config.get(knob)}")
            for record in missing:
                self.supervisor.proc_gone(record, -signal.SIGKILL, reason)
            started = [r.rank for r in records if r.address]
            if started:
                self.stop_procs(procs, started)
            done.set_exception(RuntimeError(reason))

        self.runtime.call_later(config.seconds(knob), expire)

    def _tcp_host(self) -> str | None:
        """Where local procs listen when the configured transport is tcp (None: ipc)."""
        transport = config.get("default_transport")
        if transport in ("unix", "local"):
            return None
        host = "127.0.0.1" if transport == "tcp_localhost" else socket.gethostbyname(
            socket.gethostname())
        if not self.runtime.address.startswith("tcp://"):
            self.runtime.listen_tcp(host)
        return host

    def _proc_started(self, record: ProcRecord) -> None:
        """Once every proc of a remote mesh announced its address, everyone gets the table.
        A proc that starts while someone watches the job is told so."""
        self.watched.proc_started(record)
        if not self._first_ready and self.telemetry_enabled:
            self._first_ready = True
            telemetry.process_recorder().metrics.set(("start_to_first_proc_ready_seconds",),
                                                     time.time() - self.started)
        pending = self._spawning.get(record.procs)
        if pending is None:
            if record.procs in self._abandoned:  # its mesh's spawn failed: it came too late
                self.runtime.notify(record.address, "stop_proc", {})
            return
        records, done = pending
        if not all(r.address for r in records):
            return
        del self._spawning[record.procs]
        table = [r.address for r in records]
        for r in records:
            self.runtime.notify(r.address, "table", {"procs": record.procs, "table": table})
        done.set_result((record.procs, table))

    def signal_proc(self, record: ProcRecord, sig: int) -> None:
        """Sends `sig` to a proc of the job, wherever it runs."""
        if record.pid is None:
            return
        if record.host_id == LOCAL_HOST:
            self.agent.signal(record.pid, sig)
        else:
            self.workers.signal(record.host_id, record.pid, sig)

    def _proc_config(self, proc: str, procs: str, rank: int, labels: list[str],
                     sizes: list[int], table: list[str] | None,
                     boot: bytes | None) -> dict[str, Any]:
        return {"job": self.job_id, "secret": self.identity.secret,
                "run_dir": str(self.run_dir), "proc": proc, "procs": procs, "rank": rank,
                "labels": labels, "sizes": sizes, "table": table,
                "controller": self.runtime.address, "host_id": LOCAL_HOST,
                "hostname": self.hostname, "path": list(sys.path),
                "env": dict(os.environ, MONARCH_WORKSPACE_DIR=str(self.run_dir / "workspace")),
                "cwd": os.getcwd(), "bootstrap": boot, "telemetry": self.telemetry_enabled,
                "settings": proc_settings(),
                "forward_output": bool(config.get("enable_log_forwarding"))}

    def _maybe_preload(self) -> None:
        """Has the zygote import heavy modules this script uses, so later procs start with
        them (a proc importing torch itself takes seconds)."""
        heavy: list[str] = [m for m in ("numpy", "torch")
                            if m in sys.modules and m not in self._preloaded]
        if heavy:
            self._preloaded.update(heavy)
            self.agent.preload(heavy)

    def stop_procs(self, procs: str, ranks: list[int]) -> Future[None]:
        records = [self.supervisor.procs[f"{procs}-{r}"] for r in ranks
                   if f"{procs}-{r}" in self.supervisor.procs]
        live = [r for r in records if r.state in (STARTING, RUNNING)]
        ending = [r.proc for r in records if r.state in (STARTING, RUNNING, STOPPING)]
        done = self.supervisor.stopping(records)
        for record in live:
            self.runtime.notify(record.address, "stop_proc", {})
        grace = min(config.seconds("process_exit_timeout"),
                    config.seconds("mesh_terminate_timeout"))
        self.runtime.call_later(grace, lambda: self._kill_stragglers(live))
        stopped = self._with_last_telemetry(ending, done)
        flushed: Future[None] = Future._pending()  # the mesh's streamed lines printed before it returns

        def flush() -> None:
            self.log_streamer.flush(procs)
            _copy(stopped, flushed)

        stopped.add_done_callback(
            lambda: threading.Thread(target=flush, name="monarch-log-flush", daemon=True).start())
        return flushed

    def _with_last_telemetry(self, procs: list[str], exited: Future[None]) -> Future[None]:
        """`exited`, settled only once the last telemetry of `procs` is in the store: a proc
        sends it (then a final notice, on the same link) before it exits; one that was killed
        never does, so after its exit it gets FINAL_TELEMETRY_S more."""
        out: Future[None] = Future._pending()

        def check(deadline: float) -> None:
            if (all(p in self._final_telemetry for p in procs)
                    or time.monotonic() >= deadline):
                _copy(exited, out)
            else:
                self.runtime.call_later(0.01, lambda: check(deadline))

        exited.add_done_callback(lambda: self.runtime.call_soon(
            lambda: check(time.monotonic() + FINAL_TELEMETRY_S)))
        return out

    def _kill_stragglers(self, records: list[ProcRecord]) -> None:
        for record in records:
            if record.state == "stopping":
                self.signal_proc(record, signal.SIGKILL)

    def get_or_spawn(self, name: str, cls: type, args: tuple, kwargs: dict) -> Any:
        mesh = self.singletons.get(name)
        if mesh is None:
            mesh = self.singletons[name] = self.proc_mesh.spawn(name, cls, *args, **kwargs)
        return mesh

    def _log_tail(self, proc: str, lines: int) -> list[str]:
        """The last `lines` lines `proc` wrote (stdout, stderr, logging), oldest first."""
        mine = [r for r in self.store.logs(limit=50_000) if r.tags.get("proc") == proc]
        return [f"[{r.stream}] {r.text}" for r in mine[-lines:]]

    def logging_option(self, procs: str, stream_to_client: bool,
                       aggregate_window_sec: float | None, level: int) -> Future[bool]:
        """ProcMesh.logging_option (see `_logstream`): settles False when forwarding was off
        when the mesh was spawned. Applied on a thread of its own (flushing prints)."""
        out: Future[bool] = Future._pending()
        live = [r for r in self.supervisor.procs.values()
                if r.procs == procs and r.state in (STARTING, RUNNING) and r.address]
        token = secrets.token_hex(6)
        for record in live:  # Monarch's `level`: procs' root logger
            self.runtime.notify(record.address, "log_level", {"level": level})
            self.runtime.notify(record.address, "flush_output",
                                {"token": token, "reply_to": self.runtime.address})

        def apply() -> None:
            try:
                out.set_result(self.log_streamer.set_mode(procs, stream_to_client,
                                                          aggregate_window_sec))
            except BaseException as exc:  # noqa: BLE001 - the caller's future says why
                out.set_exception(exc)

        # The mode changes once the procs shipped what they wrote before (each answers on the
        # link its lines came by), or after FLUSH_WAIT_S for one that does not answer.
        started = threading.Event()

        def start() -> None:
            if not started.is_set():
                started.set()
                threading.Thread(target=apply, name="monarch-logging-option",
                                 daemon=True).start()

        self._flushes[token] = [len(live), start]
        def give_up() -> None:
            self._flushes.pop(token, None)
            start()

        self.runtime.call_later(FLUSH_WAIT_S, give_up)
        if not live:
            self._flushes.pop(token, None)
            start()
        return out

    def _output_flushed(self, body: dict[str, Any]) -> None:
        waiting = self._flushes.get(body["token"])
        if waiting is None:
            return
        waiting[0] -= 1
        if waiting[0] <= 0:
            del self._flushes[body["token"]]
            waiting[1]()

    def live_procs(self, hosts: list[str]) -> list[tuple[Any, ...]]:
        """(host, proc mesh, rank, address, labels, sizes) of each running proc on `hosts`."""
        wanted = set(hosts)
        return [(r.host_id, r.procs, r.rank, r.address, *self.proc_extents.get(r.procs, ([], [])))
                for r in self.supervisor.procs.values()
                if r.state == RUNNING and r.host_id in wanted and r.address]

    def shutdown_hosts(self, hosts: list[str] | None) -> Future[None]:
        """Stops every live proc on `hosts` (None: on every host); settles once they exited."""
        records = [r for r in self.supervisor.procs.values()  # stopping: wait for them too
                   if r.state in (STARTING, RUNNING, STOPPING)
                   and (hosts is None or r.host_id in hosts)]
        by_mesh: dict[str, list[int]] = {}
        for record in records:
            by_mesh.setdefault(record.procs, []).append(record.rank)
        return when_all([self.stop_procs(procs, ranks) for procs, ranks in by_mesh.items()],
                        failures=False)

    def detach_workers(self, addresses: list[str]) -> Future[None]:
        """Stops this job's procs on those workers, then lets the workers go: an allocation
        about to be killed is left without anyone calling its loss a failure."""
        attached = [a for a in addresses if a in self.workers.hosts]
        done = self.shutdown_hosts(attached)
        done.add_done_callback(lambda: self.workers.release(attached))
        return done

    def end_workers(self, addresses: list[str]) -> Future[None]:
        """Stops this job's procs on those workers, then has the workers end (the hosts of a
        HostMesh that was shut down are unusable afterwards, as in Monarch)."""
        attached = [a for a in addresses if a in self.workers.hosts]
        done = self.shutdown_hosts(attached)
        done.add_done_callback(lambda: self.workers.end(attached))
        return done

    # -- end -------------------------------------------------------------------------------
    def shutdown(self, timeout: float = 5.0) -> None:
        """Stops every proc (gracefully, then by force), the zygote and the runtime."""
        global _job
        if self._shut:
            return
        self._shut = True
        if self.admin is not None:
            self.admin.close()
        try:
            if self.runtime._thread is not None and self.runtime._thread.is_alive():
                _services.call("shutdown_hosts", None).get(timeout=timeout)
        except Exception:  # noqa: BLE001 - forced below
            pass
        self.runtime.call_soon(self.workers.shutdown)
        time.sleep(0.05)
        if self.runtime.final_telemetry is not None:
            self.runtime.final_telemetry()  # the controller's own last records, into the store
        self.log_streamer.close()
        self.watcher.close(self.exit_code, self.exit_reason)
        self.exporters.close()
        self.agent.close()
        if self.output_relay is not None:
            _future.before_result = None
            self.output_relay.close()  # the procs' last output (the zygote ended them)
        self.runtime.close()
        sweep_rdma_segments(self.job_id)  # what a crashed proc's data plane could leave
        release(self.run_dir)
        with _lock:
            _job = None
        if self.exit_code == 130:
            _keep_sigint_exit()


def _keep_sigint_exit() -> None:
    """Lets a script that ended with a KeyboardInterrupt exit as one (status 130, by SIGINT).

    CPython 3.11 remembers an unhandled KeyboardInterrupt in a flag that any `exec` of source
    text clears (a dataclass made while shutting down, say), and the script then exits 1. A
    KeyboardInterrupt raised by such an `exec` sets the flag again.
    """
    try:
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        pass


def _stall_s() -> float:
    """MONARCH_STALL_S (seconds, above 0), or 10 s."""
    return number("MONARCH_STALL_S", views.DEFAULT_STALL_S, above=True)


def _copy(src: Future[Any], dst: Future[Any]) -> None:
    try:
        dst.set_result(src.get())
    except BaseException as exc:  # noqa: BLE001 - forwarded as is
        dst.set_exception(exc)
