"""A host worker: the host agent of another host, which a controller attaches to over tcp.

    python -m monarch._host.worker --address tcp://HOST:PORT [--until-shutdown]

Before a controller attaches, only peers proving the *worker secret* (MONARCH_WORKER_SECRET, or
the file named by MONARCH_WORKER_SECRET_FILE) may talk to it. An attaching controller sends its
job's secret and address; the worker then forks procs of that job on request (through its own
zygote), reports their exits, and exchanges heartbeats with the controller. If the controller
falls silent, the worker kills every proc it forked for it (no orphans) and waits for the next
controller — or exits, with `--until-shutdown`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .._future import Future
from .._identity import ProcessIdentity, set_current_process
from .._process import ProcessRuntime
from .._rundir import claim, run_root, sweep_dead
from .._wire._messages import ProcExited
from ._agent import HostAgent

HEARTBEAT_S = 1.0
"""How often a worker and its controller tell each other they are alive."""
SILENCE_S = 5.0
"""How long a worker waits for its controller's heartbeat before it gives the controller up."""


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


class Worker:
    """The worker's state, driven on its runtime's loop."""

    def __init__(self, runtime: ProcessRuntime, bind_host: str, forever: bool) -> None:
        self.runtime = runtime
        self.bind_host = bind_host
        self.forever = forever
        self.controller: str | None = None
        self.heard = 0.0
        self.procs: dict[int, str] = {}
        self.refused = 0  # peers refused so far (reported on stderr)
        self.agent = self._new_agent()
        runtime.notice_handlers.update({
            "attach": self.attach, "fork": self.fork, "signal": self.signal,
            "heartbeat": self.heartbeat, "shutdown": self.shutdown})
        runtime.call_later(HEARTBEAT_S, self.tick)

    def _new_agent(self) -> HostAgent:
        call = self.runtime.call_soon
        return HostAgent(on_fork=lambda proc, pid: call(lambda: self.forked(proc, pid)),
                         on_exit=lambda pid, status: call(lambda: self.exited(pid, status)),
                         on_lost=lambda: None)

    def attach(self, body: dict[str, Any]) -> None:
        if self.controller is not None and self.controller != body["controller"]:
            self.release("another controller attached")
        self.controller = body["controller"]
        self.runtime.outbox.credentials[self.controller] = body["secret"]
        self.heard = time.monotonic()
        self.runtime.notify(self.controller, "worker_attached", {
            "worker": body["worker"], "hostname": socket.gethostname(), "pid": os.getpid(),
            "bind_host": self.bind_host})

    def fork(self, body: dict[str, Any]) -> None:
        for proc, config in body["procs"]:
            self.agent.fork(proc, dict(config, address=f"tcp://{self.bind_host}:0"))

    def forked(self, proc: str, pid: int) -> None:
        self.procs[pid] = proc

    def exited(self, pid: int, status: int) -> None:
        proc = self.procs.pop(pid, None)
        if proc is not None and self.controller is not None:
            self.runtime.outbox.send(self.controller, ProcExited(
                proc, pid, status, socket.gethostname()), block=False)

    def signal(self, body: dict[str, Any]) -> None:
        if body["pid"] in self.procs:
            self.agent.signal(body["pid"], body["sig"])

    def heartbeat(self, body: dict[str, Any]) -> None:
        self.heard = time.monotonic()

    def shutdown(self, body: dict[str, Any]) -> None:
        self.release("the controller shut the worker down")
        if not self.forever:
            self.runtime.call_soon(self.runtime.close)

    def tick(self) -> None:
        self._report_refusals()
        if self.controller is not None:
            if time.monotonic() - self.heard > SILENCE_S:
                self.release("the controller fell silent")
                if not self.forever:
                    self.runtime.close()
                    return
            else:
                self.runtime.notify(self.controller, "worker_heartbeat",
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

    def release(self, why: str) -> None:
        """Forgets the controller and kills every proc forked for it."""
        self.controller = None
        self.procs.clear()
        self.agent.close()
        self.agent = self._new_agent()


def serve(address: str, forever: bool = True, secret: bytes | None = None) -> None:
    """Runs a worker listening at `address` (tcp://HOST:PORT) in this thread."""
    runtime = _runtime(address, secret)
    Worker(runtime, _host_of(address), forever)
    try:
        runtime.run_here()
    finally:
        runtime.outbox.close(linger_ms=200)
        shutil.rmtree(runtime.identity.run_dir, ignore_errors=True)


def serve_in_background(address: str, secret: bytes | None = None) -> Future[None]:
    """Runs a worker at `address` on a daemon thread; the future settles when it ends."""
    done: Future[None] = Future()

    def run() -> None:
        try:
            serve(address, forever=True, secret=secret)
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=run, name="monarch-worker", daemon=True).start()
    return done


def _runtime(address: str, secret: bytes | None) -> ProcessRuntime:
    if not address.startswith("tcp://"):
        raise ValueError(f"a worker listens on tcp://HOST:PORT, not {address!r}")
    # In the per-user run root, owned by this process: removed when the worker ends, and
    # swept by the next job or worker on this host if the worker was SIGKILLed.
    root = run_root()
    sweep_dead(root)
    run_dir = Path(tempfile.mkdtemp(prefix="worker-", dir=root))
    claim(run_dir)
    identity = ProcessIdentity(job_id="worker", secret=secret or worker_secret(),
                               run_dir=run_dir, name=f"worker@{socket.gethostname()}",
                               bind_host=_host_of(address))
    set_current_process(identity)
    return ProcessRuntime(identity, address)


def _host_of(address: str) -> str:
    return address.removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")


def main() -> None:
    parser = argparse.ArgumentParser(description="A monarch host worker.")
    parser.add_argument("--address", help="tcp://HOST:PORT to listen on")
    parser.add_argument("--port", type=int, default=22222,
                        help="with no --address: listen on this port of this node")
    parser.add_argument("--until-shutdown", action="store_true",
                        help="exit when the controller shuts the worker down or falls silent")
    args = parser.parse_args()
    address = args.address or f"tcp://{node_address()}:{args.port}"
    # SIGTERM (scancel, kill, a test's teardown) ends the worker through its cleanup.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(f"monarch worker listening on {address}", flush=True)
    serve(address, forever=not args.until_shutdown)


def node_address() -> str:
    """This node's address: its Slurm node name's (SLURMD_NODENAME) or its hostname's."""
    name = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return "127.0.0.1"


if __name__ == "__main__":
    main()
