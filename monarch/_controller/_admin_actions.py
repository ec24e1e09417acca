"""What the admin API does to the job: kill or stop a slice of ranks, py-spy a proc, ping every
proc, break into an actor, and drive debugger sessions.

Supervisor state is read and acted on on the controller's I/O thread (`Job._on_io`); the
server thread only waits for the answer.
"""

from __future__ import annotations

import os
import shutil
import signal as _signal
import subprocess
import sys
import time
from typing import Any

from .._runtime import _controller_calls as _services
from .. import config
from .._runtime._future import Future
from .._runtime._agent_calls import system_call
from .._runtime._recipients import procs_of
from .._geometry._selection import SelectionError, select_ranks
from .._geometry._view import View
from .._actors._stacks import group_stacks
from . import _admin_cost
from ._admin_views import CONTROLLER
from ._supervisor import RUNNING, STARTING, STOPPING

LIVE = (STARTING, RUNNING, STOPPING)
SLOW_MS = 250.0
"""A ping slower than this is `slow` in `diagnose`."""
PING_TIMEOUT_S = 5.0
STACKS_TIMEOUT_S = 5.0
"""How long `stacks` waits for the ranks' answers (a proc whose I/O thread is stuck too)."""
"""A proc that does not answer a ping within this is `fail` in `diagnose`."""


class ActionError(Exception):
    """An action that cannot be done as asked (unknown mesh, bad selection, py-spy failed...);
    the message says why. The admin API answers it with status 400, 404 or 409."""

    status = 409


class NotFound(ActionError):
    """The mesh, proc, rank or session named does not exist."""

    status = 404


class BadRequest(ActionError):
    """The request is malformed (a selection that does not parse, a bad signal name)."""

    status = 400


class Actions:
    """The admin actions of one job."""

    def __init__(self, job: Any) -> None:
        self.job = job
        self._debug: Any = None

    def on_loop(self, fn: Any, *args: Any, timeout: float = 15.0) -> Any:
        """Runs `fn(*args)` on the I/O thread; returns its result (or raises its exception).
        Its CPU time there counts to the request (`_admin_cost.io_spent`). This thread waits
        without leading the loop (`Future.get_following`), so `fn` runs on the I/O thread and
        the job's traffic is not the request's work."""
        spent = [0.0]

        def timed(*given: Any) -> Any:
            started = time.thread_time()
            try:
                return fn(*given)
            finally:
                spent[0] = time.thread_time() - started

        try:
            return self.job._on_io(timed)(*args).get_following(timeout)
        finally:
            _admin_cost.io_spent(spent[0])

    # -- targets ---------------------------------------------------------------------------
    def targets(self, mesh: str, selection: str) -> tuple[str, list[tuple[int, Any]]]:
        """(mesh id, [(rank, ProcRecord)]) selected in an actor mesh (name or id) or a proc
        mesh (id). Call on the I/O thread."""
        sup = self.job.supervisor
        record = self.find_mesh(mesh)
        try:
            if record is not None:
                labels, sizes = record.extent
                ranks = select_ranks(selection, labels, sizes)
                missing = [r for r in ranks if r not in record.ranks]
                if missing:
                    raise NotFound(f"ranks {missing} of {record.name} have no actor (yet)")
                return record.mesh, [(r, self._proc_of(record.ranks[r])) for r in ranks]
            procs = {r.rank: r for r in sup.procs.values() if r.procs == mesh}
            if not procs:
                raise NotFound(f"no mesh {mesh!r} in this job; `monarch status` lists them")
            labels, sizes = self.job.proc_extents.get(mesh, (["rank"], [len(procs)]))
            return mesh, [(r, procs[r]) for r in select_ranks(selection, labels, sizes)
                          if r in procs]
        except SelectionError as exc:
            raise BadRequest(str(exc)) from None

    def find_mesh(self, mesh: str) -> Any:
        """The MeshRecord with this id, or the newest with this name (I/O thread)."""
        meshes = self.job.supervisor.meshes
        if mesh in meshes:
            return meshes[mesh]
        named = [m for m in meshes.values() if m.name == mesh]
        return named[-1] if named else None

    def _proc_of(self, proc: str) -> Any:
        if proc == CONTROLLER:
            raise ActionError("that actor runs in the controller process (this_proc()); "
                              "killing or stopping it would end the job")
        return self.job.supervisor.procs[proc]

    # -- kill / stop -----------------------------------------------------------------------
    def kill(self, mesh: str, selection: str, sig: str = "KILL") -> dict[str, Any]:
        """Sends `sig` to the processes of the selected ranks; returns what was signalled."""
        signum = parse_signal(sig)

        def run() -> dict[str, Any]:
            mesh_id, chosen = self.targets(mesh, selection)
            killed, skipped = [], []
            for rank, record in chosen:
                entry = {"rank": rank, "proc": record.proc, "pid": record.pid,
                         "host": record.host, "state": record.state}
                if record.state in LIVE and record.pid:
                    self.job.signal_proc(record, signum)
                    killed.append(entry)
                else:
                    skipped.append(entry)
            return {"mesh": mesh_id, "signal": _signal.Signals(signum).name,
                    "killed": killed, "skipped": skipped}

        return self.on_loop(run)

    def stop(self, mesh: str, selection: str, timeout: float | None = None) -> dict[str, Any]:
        """Stops the processes of the selected ranks gracefully; waits for them to exit."""
        def run() -> tuple[str, list[tuple[int, Any]]]:
            return self.targets(mesh, selection)

        mesh_id, chosen = self.on_loop(run)
        by_procs: dict[str, list[int]] = {}
        for _, record in chosen:
            by_procs.setdefault(record.procs, []).append(record.rank)
        futures = [_services.call("stop_procs", procs, ranks) for procs, ranks in by_procs.items()]
        wait = timeout if timeout is not None else config.seconds("process_exit_timeout") + 10
        deadline = time.monotonic() + wait
        done = all(_settled(f, deadline) for f in futures)
        return {"mesh": mesh_id, "done": done,
                "stopped": [{"rank": rank, "proc": r.proc, "pid": r.pid, "host": r.host}
                            for rank, r in chosen]}

    # -- stack -----------------------------------------------------------------------------
    def stack(self, proc: str) -> str:
        """A py-spy dump of the proc's threads (procs on this host only)."""
        def run() -> tuple[int | None, str, str]:
            if proc == CONTROLLER:
                return os.getpid(), "local", self.job.hostname
            record = self.job.supervisor.procs.get(proc)
            if record is None:
                raise NotFound(f"no proc {proc!r} in this job; `monarch ps` lists them")
            if record.state not in LIVE:
                raise ActionError(f"proc {proc} is {record.state}: there is no process to "
                                  "inspect")
            return record.pid, record.host_id, record.host

        pid, host_id, host = self.on_loop(run)
        if host_id != "local":
            raise ActionError(f"proc {proc} runs on host {host}; py-spy stacks are taken on "
                              "the controller's host only")
        return py_spy_dump(pid)

    def stacks(self, mesh: str, selection: str = "") -> dict[str, Any]:
        """What each selected actor of `mesh` runs now, ranks grouped by identical stack (the
        odd ones out first; `_actors._stacks`). Every rank is asked at once; one that does not
        answer within STACKS_TIMEOUT_S is a group of its own."""
        def run() -> tuple[str, str, list[tuple[int, Any]], dict[str, tuple[str, ...]]]:
            mesh_id, targets = self.targets(mesh, selection)
            record = self.job.supervisor.meshes.get(mesh_id)
            if record is None:
                raise BadRequest(f"{mesh} is a proc mesh: stacks are taken of an actor mesh")
            entries = [(r.proc, r.procs, r.rank, r.pid, r.address)
                       for r in self.job.supervisor.procs.values() if r.address]
            return mesh_id, record.name, targets, _tables(entries)

        mesh_id, name, targets, tables = self.on_loop(run)
        asked = []
        for rank, proc in targets:
            view = View.dense([], [], offset=proc.rank)
            try:
                future: Any = system_call(procs_of(proc.procs, tables[proc.procs], view,
                                                   [proc.rank]), "stacks", {"mesh": mesh_id},
                                          combine=lambda values: values[0])
            except Exception as exc:  # noqa: BLE001 - a proc known gone: its own group
                future = exc
            asked.append((rank, proc, future))
        deadline = time.monotonic() + STACKS_TIMEOUT_S
        answers: dict[int, dict[str, Any]] = {}
        for rank, proc, future in asked:
            answers[rank] = _stack_answer(proc, future, deadline)
        return {"mesh": mesh_id, "name": name, "groups": group_stacks(answers)}

    # -- diagnose --------------------------------------------------------------------------
    def diagnose(self) -> dict[str, Any]:
        """Pings the controller's loop and every live proc; pass / slow / fail with latency."""
        started = time.perf_counter()
        self.on_loop(lambda: None)
        checks = [_check("controller loop", CONTROLLER, os.getpid(),
                         (time.perf_counter() - started) * 1000, None)]

        def run() -> tuple[list[Any], list[Any]]:
            procs = list(self.job.supervisor.procs.values())
            live = [(r.proc, r.procs, r.rank, r.pid, r.address) for r in procs
                    if r.state in LIVE and r.address]
            dead = [{"proc": r.proc, "pid": r.pid, "state": r.state, "status": r.status}
                    for r in procs if r.state not in LIVE]
            return live, dead

        live, dead = self.on_loop(run)
        entries = [(CONTROLLER, "ctl", 0, os.getpid(), self.job.runtime.address), *live]
        tables = _tables(entries)
        pings = [(entry, _Ping(tables, entry)) for entry in entries]
        deadline = time.monotonic() + PING_TIMEOUT_S
        for (proc, _, _, pid, _), ping in pings:
            checks.append(ping.result(proc, pid, deadline))
        ok = all(c["status"] != "fail" for c in checks)
        return {"ok": ok, "checks": checks, "dead": dead,
                "thresholds": {"slow_ms": SLOW_MS, "timeout_s": PING_TIMEOUT_S}}

    # -- debugger --------------------------------------------------------------------------
    def break_next(self, mesh: str, rank: int) -> dict[str, Any]:
        """Makes the actor at `rank` of `mesh` stop in pdb at its next message."""
        def run() -> dict[str, Any]:
            record = self.find_mesh(mesh)
            if record is None or rank not in record.ranks:
                raise NotFound(f"no actor {mesh}[{rank}] in this job")
            proc = self._proc_of(record.ranks[rank])
            self.job.runtime.notify(proc.address, "break_next", {"mesh": record.mesh})
            return {"mesh": record.mesh, "name": record.name, "rank": rank, "proc": proc.proc}

        return self.on_loop(run)

    def debugger(self) -> Any:
        """The job's DebugController actor mesh (spawned on first use)."""
        if self._debug is None:
            from .._actors._debug import debug_controller

            self._debug = debug_controller()
        return self._debug


def _settled(future: Future[Any], deadline: float) -> bool:
    try:
        future.get(timeout=max(deadline - time.monotonic(), 0.0))
        return True
    except Exception:
        return False


def parse_signal(sig: str | int) -> int:
    """`KILL`, `SIGKILL`, `9` -> 9."""
    text = str(sig).strip().upper()
    try:
        if text.isdigit():
            return int(_signal.Signals(int(text)))
        return int(_signal.Signals[text if text.startswith("SIG") else "SIG" + text])
    except (KeyError, ValueError):
        raise BadRequest(f"unknown signal {sig!r} (e.g. KILL, TERM, INT, 9)") from None


def py_spy_dump(pid: int | None) -> str:
    """`py-spy dump --pid PID` (py-spy from PYSPY_BIN, this Python's environment, or PATH);
    ActionError with why if not."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    binary = (os.environ.get("PYSPY_BIN")
              or (beside if os.access(beside, os.X_OK) else None)
              or shutil.which("py-spy"))
    if not binary:
        raise ActionError("py-spy is not installed: `pip install py-spy` (or set PYSPY_BIN)")
    if not pid:
        raise ActionError("the proc has no pid yet (still starting)")
    try:
        out = subprocess.run([binary, "dump", "--pid", str(pid)], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ActionError(f"py-spy could not run: {exc}") from None
    if out.returncode != 0:
        why = (out.stderr or out.stdout).strip() or f"exit status {out.returncode}"
        raise ActionError(f"py-spy dump of pid {pid} failed: {why}")
    return out.stdout


def _stack_answer(proc: Any, future: Any, deadline: float) -> dict[str, Any]:
    """One rank's answer to `stacks`, or its error (gone, no answer in time)."""
    if isinstance(future, Exception):
        return {"proc": proc.proc, "error": f"{type(future).__name__}: {future}"}
    try:
        value = future.get(timeout=max(deadline - time.monotonic(), 0.0))
    except TimeoutError:
        return {"proc": proc.proc, "error": f"no answer within {STACKS_TIMEOUT_S:g}s"}
    except Exception as exc:  # noqa: BLE001 - reported as the rank's group
        return {"proc": proc.proc, "error": f"{type(exc).__name__}: {exc}"}
    return dict(value)


def _tables(entries: list[tuple[str, str, int, Any, str]]) -> dict[str, tuple[str, ...]]:
    by_procs: dict[str, dict[int, str]] = {}
    for _, procs, rank, _, address in entries:
        by_procs.setdefault(procs, {})[rank] = address
    return {procs: tuple(ranks.get(i, "") for i in range(max(ranks) + 1))
            for procs, ranks in by_procs.items()}


class _Ping:
    """One `stats` call to one proc, timed from send to answer."""

    def __init__(self, tables: dict[str, tuple[str, ...]],
                 entry: tuple[str, str, int, Any, str]) -> None:
        _, procs, rank, _, _ = entry
        view = View.dense([], [], offset=rank)
        self.sent = time.perf_counter()
        self.answered: float | None = None
        try:
            self.future: Any = system_call(procs_of(procs, tables[procs], view, [rank]),
                                           "stats", combine=lambda values: values[0])
        except Exception as exc:
            self.future = exc
            return
        self.future.add_done_callback(self._answered)

    def _answered(self) -> None:
        self.answered = time.perf_counter()

    def result(self, proc: str, pid: Any, deadline: float) -> dict[str, Any]:
        if isinstance(self.future, Exception):
            return _check("ping", proc, pid, None, f"{type(self.future).__name__}: {self.future}")
        try:
            value = self.future.get(timeout=max(deadline - time.monotonic(), 0.0))
            stats = value
        except TimeoutError:
            return _check("ping", proc, pid, None, f"no answer within {PING_TIMEOUT_S:g}s")
        except Exception as exc:
            return _check("ping", proc, pid, None, f"{type(exc).__name__}: {exc}")
        answered = self.answered or time.perf_counter()
        check = _check("ping", proc, pid, (answered - self.sent) * 1000, None)
        check["stats"] = {k: stats.get(k) for k in ("received", "bad_frames", "denied_peers",
                                                    "internal_errors")}
        check["actors"] = len(stats.get("actors", {}))
        return check


def _check(name: str, proc: str, pid: Any, latency_ms: float | None,
           error: str | None) -> dict[str, Any]:
    if latency_ms is None:
        status = "fail"
    else:
        status = "slow" if latency_ms > SLOW_MS else "pass"
    return {"check": name, "proc": proc, "pid": pid,
            "latency_ms": None if latency_ms is None else round(latency_ms, 3),
            "status": status, "error": error}
