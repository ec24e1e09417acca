"""A host worker: the host agent of another host, which controllers attach to over tcp.

    python -m monarch._host.worker --address tcp://HOST:PORT [--until-shutdown]
        [--ready-file PATH] [--hostname NAME] [--workspace-dir DIR]

Before a controller attaches, only peers proving the *worker secret* (MONARCH_WORKER_SECRET, or
the file named by MONARCH_WORKER_SECRET_FILE) may talk to it. An attaching controller sends its
job's secret and address; the worker then forks procs of that job on request (through its own
zygote, started once and kept for the worker's life), reports their exits, and exchanges
heartbeats with the controller.

Several controllers may be attached at once (a script and `monarch exec`); each one's procs are
its own. A controller that shuts down or falls silent for `SILENCE_S` is *released*: the worker
kills the procs it forked for it and keeps serving the others — and the next controller (the
same script run again, a restarted notebook kernel) attaches in one round trip. With
`--until-shutdown` the worker exits once its last controller left.

The worker keeps `worker.json` in its run directory (address, pid, hostname, attached
controllers), which `monarch jobs` reads to tell allocations with a client from those without.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import dataclasses
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .._runtime._future import Future
from .._runtime._identity import ProcessIdentity, set_current_process
from .._runtime import _gather
from .._runtime._process_runtime import ProcessRuntime
from .._runtime._rundir import claim, ipc_endpoint, release, run_root, sweep_dead
from .._runtime._instrument import RECOVERED_NOTICE, crash_stem
from .._wire._messages import Notice, ProcExited
from ..telemetry._batch import encode_batch
from ..telemetry._recorder import recovered_batch
from .._wire._switch import switch
from ._agent import HostAgent, Prefork, prefork

HEARTBEAT_S = 1.0
"""How often a worker and its controllers tell each other they are alive."""
SILENCE_S = 5.0
"""How long a worker waits for a controller's heartbeat before it gives the controller up."""
STATUS_FILE = "worker.json"
"""In a worker's run directory: what it is and who is attached (see `write_status`)."""
WORKSPACE_ENV = "MONARCH_WORKSPACE_DIR"
"""Where synced workspaces live on a host; the worker sets it for the procs it forks."""


def worker_secret() -> bytes:
    """The secret workers and controllers share (MONARCH_WORKER_SECRET[_FILE])."""
    text = os.environ.get("MONARCH_WORKER_SECRET")
    path = os.environ.get("MONARCH_WORKER_SECRET_FILE")
    if text is None and path:
        text = Path(path).read_text().strip()
    if not text:
        raise RuntimeError("set MONARCH_WORKER_SECRET or MONARCH_WORKER_SECRET_FILE: workers "
                           "only accept controllers that know the worker secret")
    return text.encode()


class OwnGaps:
    """Silence is judged only over time this process itself ran. After a gap in its own ticks
    (it was stopped, or starved of CPU) a peer's messages may sit unread in its inbox, so every
    peer gets a fresh window instead of being declared silent."""

    def __init__(self) -> None:
        self._ticked = time.monotonic()

    def resumed(self, now: float) -> bool:
        """True when this tick came more than a heartbeat late (call once per tick)."""
        late = now - self._ticked > 2 * HEARTBEAT_S
        self._ticked = now
        return late


class Swamped:
    """Silence is not judged while this host is swamped (`SWAMPED_PER_CPU` runnable threads
    per CPU or more): there this process's threads and its zmq thread wait seconds for a CPU,
    and heartbeats that were sent arrive late (16 hosts under a broadcast burst to 1,024 actors
    on 2 cores: every host declared lost while all beat every second). Peers then get a fresh
    window, for at most `SWAMPED_MAX_S` in a row: a peer that is really gone is still found."""

    def __init__(self, load: Any = None) -> None:
        self.load = load or _gather.host_load
        self.since: float | None = None
        self.samples: collections.deque[float] = collections.deque(
            maxlen=int(SILENCE_S / HEARTBEAT_S))  # one a tick: the load over the window

    def postpones(self, now: float, due: bool) -> bool:
        """True when a judgement of silence (`due`: some peer is past its window) waits.
        Call once a tick: it samples the load (runnable threads come and go by the ms, so
        the window's worst sample counts)."""
        self.samples.append(self.load.per_cpu())
        if not due:
            return False
        if max(self.samples) < SWAMPED_PER_CPU:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since < SWAMPED_MAX_S


SWAMPED_PER_CPU = 16.0
"""Runnable threads per CPU from which a host is too swamped to judge silence."""
SWAMPED_MAX_S = 30.0
"""The longest a swamped process postpones judging its peers silent."""


@dataclasses.dataclass
class Controller:
    """One attached controller. Mutated on the worker's loop only."""

    address: str
    job: str
    heard: float
    since: float = dataclasses.field(default_factory=time.time)
    pids: set[int] = dataclasses.field(default_factory=set)


class Worker:
    """The worker's state, driven on its runtime's loop."""

    def __init__(self, runtime: ProcessRuntime, bind_host: str, forever: bool,
                 hostname: str | None = None, workspace_dir: Path | None = None,
                 zygote: Prefork | None = None) -> None:
        self.runtime = runtime
        self.bind_host = bind_host
        self.forever = forever
        self.hostname = hostname or socket.gethostname()
        self.workspace_dir = workspace_dir or runtime.identity.run_dir / "workspace"
        self.controllers: dict[str, Controller] = {}
        self.pids: dict[int, tuple[str, str]] = {}
        """pid -> (controller address, proc id) of every live proc this worker forked."""
        self._forking: dict[str, str] = {}  # proc id -> controller, until its pid is known
        self._crash_stems: dict[str, tuple[Path, str]] = {}  # proc id -> (crash files, job)
        self.refused = 0  # peers refused so far (reported on stderr)
        self._gaps = OwnGaps()
        self._swamped = Swamped()
        self.agent = self._make_agent(zygote)
        self.agent.start()  # the zygote imports the runtime before it is needed
        runtime.notice_handlers.update({
            "attach": self.attach, "fork": self.fork, "signal": self.signal,
            "heartbeat": self.heartbeat, "shutdown": self.shutdown,
            "exit": self.exit, "lost": self.lost})
        runtime.call_later(HEARTBEAT_S, self.tick)
        self.write_status()

    def _make_agent(self, zygote: Prefork | None) -> HostAgent:
        """The host agent (zygote: `zygote` when forked already) that forks this host's
        procs."""
        call = self.runtime.call_soon
        env = dict(os.environ, **{WORKSPACE_ENV: str(self.workspace_dir)})
        return HostAgent(on_fork=lambda proc, pid: call(lambda: self.forked(proc, pid)),
                         on_exit=lambda pid, status: call(lambda: self.exited(pid, status)),
                         on_lost=lambda: None, env=env, forked=zygote)

    def attach(self, body: dict[str, Any]) -> None:
        address = body["controller"]
        old = self.controllers.get(address)
        if old is not None and body.get("renew"):
            self.release(old, "the controller attaches anew: it had lost this host", last=False)
        self.runtime.outbox.credentials[address] = body["secret"]
        if address not in self.controllers:
            self.controllers[address] = Controller(address, body.get("job", ""),
                                                   time.monotonic())
        self.controllers[address].heard = time.monotonic()
        self.runtime.notify(address, "worker_attached", {
            "worker": body["worker"], "hostname": self.hostname, "pid": os.getpid(),
            "bind_host": self.bind_host})
        self.write_status()

    def fork(self, body: dict[str, Any]) -> None:
        agent = self.agent
        for proc, config in body["procs"]:
            controller = config["controller"]
            if controller not in self.controllers:
                continue  # released meanwhile: its procs are not wanted any more
            self._forking[proc] = controller
            self._crash_stems[proc] = crash_stem(Path(config["run_dir"]), proc), config["job"]
            agent.fork(proc, dict(config, address=self._proc_address(proc),
                                  hostname=self.hostname))

    def _proc_address(self, proc: str) -> str:
        """Where a proc forked here listens: tcp on the worker's host, or, for a worker on
        an ipc address (this host only), an ipc socket in the worker's run directory."""
        if self.runtime.address.startswith("ipc://"):
            return ipc_endpoint(self.runtime.identity.run_dir, proc)
        return f"tcp://{self.bind_host}:0"

    def forked(self, proc: str, pid: int) -> None:
        controller = self._forking.pop(proc, None)
        link = self.controllers.get(controller) if controller else None
        if link is None:
            self._kill(pid)  # its controller left while it was being forked
            return
        link.pids.add(pid)
        self.pids[pid] = (link.address, proc)

    def exited(self, pid: int, status: int) -> None:
        owner = self.pids.pop(pid, None)
        stem, job = self._crash_stems.pop(owner[1] if owner else "", (None, None))
        if owner is None:
            return
        address, proc = owner
        link = self.controllers.get(address)
        if link is not None:
            link.pids.discard(pid)
            try:
                batch = None if status == 0 or stem is None else recovered_batch(
                    str(stem), {"host": self.hostname, "proc": proc, "pid": pid, "job": job})
                if batch is not None:  # what it had not shipped: before its exit, one link
                    self.runtime.outbox.send(address, Notice(RECOVERED_NOTICE, {
                        "proc": proc, "batch": encode_batch(batch)}), block=False)
            except Exception as exc:  # noqa: BLE001 - the exit is reported all the same
                print(f"monarch worker: the records of dead proc {proc} not recovered: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            self.runtime.outbox.send(address, ProcExited(proc, pid, status, self.hostname),
                                     block=False)

    def signal(self, body: dict[str, Any]) -> None:
        if body["pid"] in self.pids:
            self._signal(body["pid"], body["sig"])

    def heartbeat(self, body: dict[str, Any]) -> None:
        link = self._sender(body)
        if link is not None:
            link.heard = time.monotonic()

    def lost(self, body: dict[str, Any]) -> None:
        """The controller declared this host lost (a pause or a partition longer than the
        heartbeat): what it ran here is dead to the job, so it ends (no zombie on this side)."""
        link = self._sender(body)
        if link is not None:
            self.release(link, f"the controller lost this host: {body.get('why', '')}")

    def shutdown(self, body: dict[str, Any]) -> None:
        link = self._sender(body)
        if link is not None:
            self.release(link, "the controller shut down")

    def exit(self, body: dict[str, Any]) -> None:
        """A controller shut this host down (`HostMesh.shutdown`): every proc forked here
        ends, and so does the worker (a `forever` one too): the host is no longer usable."""
        if self._sender(body) is None:
            return  # only an attached controller may end the worker
        for link in list(self.controllers.values()):
            self.release(link, "the host was shut down")
        self.runtime.call_soon(self.runtime.close)

    def _sender(self, body: dict[str, Any]) -> Controller | None:
        address = body.get("controller")
        if address is None and len(self.controllers) == 1:
            return next(iter(self.controllers.values()))
        return self.controllers.get(address) if address else None

    def tick(self) -> None:
        self._report_refusals()
        now = time.monotonic()
        resumed = self._gaps.resumed(now) or self._swamped.postpones(
            now, any(now - link.heard > SILENCE_S for link in self.controllers.values()))
        for link in list(self.controllers.values()):
            if resumed:
                link.heard = max(link.heard, now)
            elif now - link.heard > SILENCE_S:
                self.release(link, "the controller fell silent")
                continue
            # a late tick still beats: this worker is alive now (skipping it left a worker
            # starved of CPU silent for its controller, tick after late tick)
            self.runtime.notify(link.address, "worker_heartbeat",
                                {"worker": self.runtime.address})
        if not self.runtime._closing:
            self.runtime.call_later(HEARTBEAT_S, self.tick)

    def _report_refusals(self) -> None:
        """Says on stderr when peers without the worker secret were refused (counted by the
        inbox): a controller with the wrong secret sees only a timeout, the worker says why."""
        stats = self.runtime.inbox.stats
        refused = stats.denied_peers + stats.failed_handshakes
        if refused > self.refused:
            print(f"monarch worker: refused {refused - self.refused} connection(s) that did not "
                  f"prove the worker secret ({refused} in all)", file=sys.stderr, flush=True)
            self.refused = refused

    def release(self, link: Controller, why: str, last: bool = True) -> None:
        """Forgets a controller and kills every proc forked for it (the zygote stays); a
        worker that is not `forever` ends with its last controller, unless not ``last``."""
        print(f"monarch worker: released the controller at {link.address} ({len(link.pids)} "
              f"procs killed): {why}", file=sys.stderr, flush=True)
        self.controllers.pop(link.address, None)
        self._forking = {p: c for p, c in self._forking.items() if c != link.address}
        for pid in link.pids:
            self.pids.pop(pid, None)
            self._kill(pid)
        self.write_status()
        if last and not self.forever and not self.controllers:
            self.runtime.call_soon(self.runtime.close)

    def _kill(self, pid: int) -> None:
        self._signal(pid, signal.SIGKILL)

    def _signal(self, pid: int, sig: int) -> None:
        self.agent.signal(pid, sig)

    def write_status(self) -> None:
        """Writes `worker.json` (atomically) in the run directory."""
        write_json(self.runtime.identity.run_dir / STATUS_FILE, {
            "address": self.runtime.address, "pid": os.getpid(), "hostname": self.hostname,
            "workspace": str(self.workspace_dir),
            "controllers": [{"address": c.address, "job": c.job, "since": c.since,
                             "procs": len(c.pids)} for c in self.controllers.values()]})

    def close(self) -> None:
        """Kills every proc and the zygote."""
        self.agent.close()


def write_json(path: Path, value: Any) -> None:
    """Writes `value` as JSON to `path` atomically (a reader sees the old file or the new)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def serve(address: str, forever: bool = True, secret: bytes | None = None, *,
          ready_file: str | None = None, hostname: str | None = None,
          workspace_dir: str | None = None, announce: bool = False,
          zygote: Prefork | None = None) -> None:
    """Runs a worker listening at `address` (tcp://HOST:PORT; port 0 picks one) in this thread.

    Args:
        announce: print `monarch worker listening on ADDRESS` once listening.
        ready_file: once listening, `{"address", "pid"}` is written there (atomically).
        hostname: the host's name as controllers and users see it (default: the hostname).
        workspace_dir: where `HostMesh.sync_workspace` puts code on this host (default: the
            worker's run directory, removed when it exits).
        zygote: the host's zygote, forked before this process's threads (`main`).
    """
    runtime = _runtime(address, secret)

    # A worker on a daemon thread (start_worker_loop_forever) is cut off when its process
    # exits: its run directory goes with the process all the same.
    def at_exit() -> None:
        release(runtime.identity.run_dir)

    atexit.register(at_exit)
    worker = None
    try:
        worker = Worker(runtime, _host_of(split_alias(address)[0]), forever, hostname,
                        Path(workspace_dir) if workspace_dir else None, zygote)
        if announce:
            print(f"monarch worker listening on {runtime.address}", flush=True)
        if ready_file:
            write_json(Path(ready_file), {"address": runtime.address, "pid": os.getpid()})
        runtime.run_here()
    finally:
        try:
            if worker is not None:
                worker.close()
            runtime.outbox.close(linger_ms=200)
        finally:
            release(runtime.identity.run_dir)
            atexit.unregister(at_exit)


def serve_in_background(address: str, secret: bytes | None = None) -> Future[None]:
    """Runs a worker at `address` on a daemon thread; the future settles when it ends."""
    done: Future[None] = Future._pending()

    def run() -> None:
        try:
            serve(address, forever=True, secret=secret)
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=run, name="monarch-worker", daemon=True).start()
    return done


def split_alias(address: str) -> tuple[str, str]:
    """(dial, bind) of a worker address: `DIAL@BIND` (e.g. `tcp://PUBLIC:P@tcp://0.0.0.0:P`,
    for a worker that can only bind a wildcard behind NAT) advertises DIAL and listens on
    BIND; any other address is both."""
    dial, at, bind = address.partition("@")
    if at and dial.startswith(("tcp://", "ipc://")) and bind.startswith(("tcp://", "ipc://")):
        return dial, bind
    return address, address


def _runtime(address: str, secret: bytes | None) -> ProcessRuntime:
    dial, bind = split_alias(address)
    if dial != bind and dial.endswith(":0"):
        raise ValueError(f"an alias address advertises a fixed port, not 0: {address!r}")
    # an alias is known (dialled, authenticated, named) by its DIAL part
    return _listening_runtime(bind, secret, _host_of(dial), dial if dial != bind else None)


def _listening_runtime(address: str, secret: bytes | None, bind_host: str,
                       advertise: str | None) -> ProcessRuntime:
    if not address.startswith(("tcp://", "ipc://")):
        raise ValueError(f"a worker listens on tcp://HOST:PORT, tcp://HOST:fdN (an inherited "
                         f"listening socket) or ipc:///PATH, not {address!r}")
    # In the per-user run root, owned by this process: removed when the worker ends, and
    # swept by the next job or worker on this host if the worker was SIGKILLed.
    secret = secret or worker_secret()
    root = run_root()
    sweep_dead(root)
    run_dir = Path(tempfile.mkdtemp(prefix="worker-", dir=root))
    try:  # a worker that cannot listen (the port is taken; SIGTERM now) leaves nothing
        claim(run_dir)
        identity = ProcessIdentity(job_id="worker", secret=secret, run_dir=run_dir,
                                   name=f"worker@{socket.gethostname()}", bind_host=bind_host)
        set_current_process(identity)
        return ProcessRuntime(identity, address, advertise)
    except BaseException:
        release(run_dir)
        raise


def _host_of(address: str) -> str:
    if address.startswith("ipc://"):
        return "127.0.0.1"  # an ipc worker is reached from this host only
    return address.removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")


def main() -> None:
    parser = argparse.ArgumentParser(description="A monarch host worker.")
    parser.add_argument("--address", help="tcp://HOST:PORT to listen on (port 0: any)")
    parser.add_argument("--port", type=int, default=22222,
                        help="with no --address: listen on this port of this node")
    parser.add_argument("--until-shutdown", action="store_true",
                        help="exit when the last controller shuts the worker down or falls "
                             "silent")
    parser.add_argument("--ready-file", help="write {address, pid} there once listening")
    parser.add_argument("--hostname", help="the host's name as users see it")
    parser.add_argument("--workspace-dir", help="where synced workspaces go on this host")
    args = parser.parse_args()
    # now, while this process has one thread: the zygote forked from it starts with the proc
    # runtime imported (an exec'd one would start an interpreter and import it again)
    zygote = prefork() if switch("MONARCH_PREFORK_ZYGOTE") else None
    address = args.address or f"tcp://{node_address()}:{args.port}"
    # SIGTERM (scancel, kill, a test's teardown) ends the worker through its cleanup.
    signal.signal(signal.SIGTERM, _end_on_sigterm)
    serve(address, forever=not args.until_shutdown, ready_file=args.ready_file,
          hostname=args.hostname, workspace_dir=args.workspace_dir, announce=True,
          zygote=zygote)


def _end_on_sigterm(signum: int, frame: object) -> None:
    # Once: a second SIGTERM (scancel's reaches a Slurm worker from slurmstepd and again
    # through srun) must not cut the cleanup short and leave the run directory behind.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(128 + signum)


def node_address() -> str:
    """This node's address: its Slurm node name's (SLURMD_NODENAME) or its hostname's."""
    name = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return "127.0.0.1"


if __name__ == "__main__":
    main()
