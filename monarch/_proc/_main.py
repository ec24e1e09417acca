"""A proc's life: join the job, host actors, exit when told (or when the spawner dies).

`run(config)` is called in a process freshly forked by the zygote. Its main thread becomes the
I/O loop; actors run on their own threads. The config (msgpack-able dict) carries: job, secret,
run_dir, proc, procs (proc mesh id), rank, labels, sizes, table, address, controller, host_id,
hostname, env, path, cwd, and optionally bootstrap (a pickled callable).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from .._actors import _system_agent as _agent, _debug
from .._runtime import _instrument, _process_runtime as _process, _controller_calls as _services
from .._runtime._context import Context, Instance, install_log_prefix, set_root
from .._runtime._settings import apply_settings
from .._host import _lifeline
from .._mesh._host_mesh import local_host_mesh
from .._runtime._identity import ProcessIdentity, set_current_process
from .._mesh._proc_mesh import ProcMesh
from .._runtime._process_runtime import ProcessRuntime
from .._geometry._view import View
from .._wire import _serial
from .._wire._messages import OK, Call, ProcStarted
from .._wire._switch import switch
from .._workspace import _proc as _workspace_proc


def _batch_scheduling() -> None:
    """Puts this proc's threads (those it starts from now on) under SCHED_BATCH, unless the
    switch MONARCH_PROC_BATCH_SCHED is off: a thread woken by a message then does not preempt
    the thread running, which holds the GIL the woken one would only wait for (DESIGN.md,
    "Processes"). The controller refuses a bad value at its start; here one counts as on."""
    try:
        on = switch("MONARCH_PROC_BATCH_SCHED")
    except ValueError:
        on = True
    if on and hasattr(os, "sched_setscheduler"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:  # a policy this kernel or container refuses: keep the default
            pass


def run(config: dict[str, Any]) -> int:
    """Runs this process as proc `config["proc"]` until it is stopped; returns the exit code."""
    settings = config.get("settings") or {}
    _lifeline.die_with_parent(os.getppid(),
                              pdeathsig=settings.get("mesh_bootstrap_enable_pdeathsig", True))
    _adopt_environment(config)
    _batch_scheduling()
    _workspace_proc.startup_paths()
    identity = ProcessIdentity(job_id=config["job"], secret=config["secret"],
                               run_dir=Path(config["run_dir"]), name=config["proc"],
                               hostname=config["hostname"],
                               bind_host=_bind_host(config["address"]))
    set_current_process(identity)
    runtime = ProcessRuntime(identity, config["address"])
    apply_settings(runtime, settings)
    _process.set_current(runtime)
    _services.set_controller(config["controller"])
    if config["table"] is not None:
        runtime.learn_table(config["procs"], config["table"])
    runtime.notice_handlers["table"] = lambda body: runtime.learn_table(body["procs"],
                                                                        body["table"])
    proc_mesh = _own_proc_mesh(config, runtime)
    install_system_methods(runtime, proc_mesh)
    set_root(Context(Instance(
        actor_id=f"{config['proc']}/client", name=f"{config['proc']}/client",
        class_name="client", rank=_rank_point(config),
        proc_id=config["proc"], creator=None, sender=f"{config['proc']}/client",
        proc_mesh=proc_mesh)))
    install_log_prefix()
    logging.getLogger().setLevel(logging.INFO)  # as Monarch's procs: logging_option changes it
    _instrument.start_process(runtime, enabled=config["telemetry"], ship_to=config["controller"],
                              ingest=None, capture=True,
                              passthrough=not config.get("forward_output", False))
    _debug.install()
    started = ProcStarted(config["proc"], os.getpid(), runtime.address, config["hostname"])
    if config.get("bootstrap"):
        _bootstrap(runtime, _serial.loads(config["bootstrap"]), config["controller"], started)
    else:
        runtime.outbox.send(config["controller"], started)
    runtime.run_here()
    _join_threads(runtime, deadline=time.monotonic() + ACTOR_EXIT_S)
    runtime.outbox.close(linger_ms=1000)
    # Closing a socket only queues its last messages for zmq's I/O thread; the process exits
    # right after (os._exit in the zygote's child), so wait (1 s at most) until they left.
    runtime.ctx.destroy(linger=1000)
    return runtime.exit_code


def _bootstrap(runtime: ProcessRuntime, bootstrap: Any, controller: str,
               started: ProcStarted) -> None:
    """Runs the proc mesh's `bootstrap` (sync or async) before any actor of another process is
    spawned here: it runs on a thread of its own while the loop runs (so it may spawn actors on
    `this_proc()` and call them), spawns from elsewhere wait until it returned. The proc
    announces itself at once; the controller hears `bootstrapped` when it returned (the mesh's
    `initialized` settles), or `bootstrap_failed` with the exception, and the proc ends."""
    runtime.held_spawns = []
    runtime.outbox.send(controller, started)

    def run() -> None:
        try:
            result = bootstrap()
            if inspect.iscoroutine(result):
                asyncio.run(result)
        except BaseException as caught:  # noqa: BLE001 - reported, and the proc ends
            traceback.print_exc()
            sys.stderr.flush()
            exc = caught  # `caught` is unbound when the except block ends
            remote_tb = traceback.format_exc()
            runtime.call_soon(lambda: failed(exc, remote_tb))
            return
        runtime.call_soon(release)

    def release() -> None:
        held, runtime.held_spawns = runtime.held_spawns or [], None
        spawn = runtime.system_methods["spawn"]
        for msg, frames in held:
            spawn(msg, frames)
        runtime.notify(controller, "bootstrapped", {"proc": started.proc})

    def failed(exc: BaseException, remote_tb: str) -> None:
        error = _serial.dumps_exception(exc, remote_tb, in_band=True)[0]  # one field
        runtime.notify(controller, "bootstrap_failed", {"proc": started.proc, "error": error})
        runtime.exit_code = 1
        runtime.close()  # run() ends: the notice leaves before the process does

    threading.Thread(target=run, name="monarch-bootstrap", daemon=True).start()


def install_system_methods(runtime: ProcessRuntime, proc_mesh: Any) -> None:
    """A proc's system agent (see `_agent`), plus what only procs do: stop_proc, and the
    controller's notices of dead procs (and of an address a new proc took over from a dead one)
    and of failed actors."""
    _agent.install(runtime, proc_mesh)
    _workspace_proc.install(runtime)
    runtime.system_methods["stop_proc"] = _stop_proc_handler(runtime)
    runtime.notice_handlers["proc_died"] = lambda body: runtime.mark_dead(
        body["address"], body["reason"])
    runtime.notice_handlers["address_reused"] = lambda body: runtime.revive(body["address"])

    def procs_died(body: dict[str, str]) -> None:  # those that died before it started
        for address, reason in body.items():
            if address != runtime.address:
                runtime.mark_dead(address, reason)

    runtime.notice_handlers["procs_died"] = procs_died

    def actor_failed(body: dict[str, Any]) -> None:
        runtime.failed_actors.setdefault((body["mesh"], body["base_rank"]), body["report"])

    runtime.notice_handlers["actor_failed"] = actor_failed
    runtime.notice_handlers["stop_proc"] = lambda body: _stop_proc(runtime, None, 0)
    # ProcMesh.logging_option(level=...): the level of the proc's root Python logger
    runtime.notice_handlers["log_level"] = lambda body: logging.getLogger().setLevel(
        body["level"])
    runtime.notice_handlers["flush_output"] = lambda body: _flush_output(runtime, body)
    # whether someone watches the job live: lines leave twice a second, else once
    runtime.notice_handlers[_instrument.WATCHED_NOTICE] = _instrument.set_watched


def _flush_output(runtime: ProcessRuntime, body: dict[str, Any]) -> None:
    """Ships every line written so far, then says so on the same link (so the controller has
    them when it hears it): logging_option switches modes between two lines, not mid-flight."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if runtime.flush_telemetry is not None:
        runtime.flush_telemetry()
    runtime.notify(body["reply_to"], "output_flushed", {"token": body["token"]})


ACTOR_EXIT_S = 5.0
"""How long a proc that ends waits for its actors' threads and its stop thread to end."""


def _join_threads(runtime: ProcessRuntime, deadline: float) -> None:
    """Waits for the threads of the actors that ended and for the stop thread (it holds the
    stopped actors until it returns), then drops the actors: the process then finalizes with
    no live thread holding an actor. A daemon thread still running at exit never unwinds, so
    what its frames hold (an actor, its class, its module's globals) outlives the
    interpreter's teardown, their `__del__` never run."""
    threads = [slot.thread for slot in runtime.actors.values()
               if slot.done.is_set() and slot.thread is not None]
    for thread in threads + runtime.stopping:
        if thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    runtime.actors.clear()


def _stop_proc_handler(runtime: ProcessRuntime) -> Any:
    def stop_proc(msg: Call, frames: list[Any]) -> None:
        _stop_proc(runtime, msg.port, msg.lo)

    return stop_proc


def _stop_proc(runtime: ProcessRuntime, port: tuple | None, index: int) -> None:
    """Stops every actor (their `__cleanup__` runs), ships the last telemetry, answers, and
    ends the loop."""
    slots = list(runtime.actors.values())

    def stop_all() -> None:
        for slot in slots:
            slot.request_stop("the proc was stopped")
        for slot in slots:
            slot.done.wait(timeout=10)
        if runtime.final_telemetry is not None:  # before the answer: nothing recorded is lost
            runtime.final_telemetry()
        if port is not None:
            runtime.reply(port, index, OK)
        runtime.call_soon(lambda: _close(runtime))

    thread = threading.Thread(target=stop_all, name="monarch-stop", daemon=True)
    runtime.stopping.append(thread)
    thread.start()


def _close(runtime: ProcessRuntime) -> None:
    """Ships the telemetry recorded since the last shipment (a stopped proc's last transfers
    and logs reach the controller), then ends the loop. On the loop."""
    if runtime.flush_telemetry is not None:
        runtime.flush_telemetry()
    runtime.close()


def _bind_host(address: str) -> str:
    """Where this proc's other tcp listeners (the data plane's) bind: its inbox's host."""
    if not address.startswith("tcp://"):
        return "127.0.0.1"
    return address.removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")


def _adopt_environment(config: dict[str, Any]) -> None:
    if config["env"] is not None:
        os.environ.clear()
        os.environ.update(config["env"])
    sys.path[:] = config["path"]
    try:
        os.chdir(config["cwd"])
    except OSError:
        pass


def _rank_point(config: dict[str, Any]) -> Any:
    return View.dense(config["labels"], config["sizes"]).point(config["rank"])


def _own_proc_mesh(config: dict[str, Any], runtime: ProcessRuntime) -> Any:
    """this_proc() in this process: built when first asked (a remote proc learns its mesh's
    table after it started)."""
    full = View.dense(config["labels"], config["sizes"])
    view = full.slice(**dict(full.point(config["rank"])))
    # a reference to this host: procs spawned from it start as this proc's host mesh's did
    host = local_host_mesh(config["host_id"], launch=config.get("host_launch"), owned=False)
    made: list[ProcMesh] = []

    def mesh() -> ProcMesh:
        if not made:
            table = runtime.tables.get(config["procs"]) or tuple(config["table"] or ())
            made.append(ProcMesh(procs=config["procs"], table=tuple(table), full=full, view=view,
                                 host_mesh=host))
        return made[0]

    return mesh

