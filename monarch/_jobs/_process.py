"""ProcessJob: every host is a local host-worker process, on its own loopback address.

Host `i` of the job (meshes in order) listens on `tcp://127.0.0.(2+i):<free port>`, so the procs
of different "hosts" bind different addresses, as they would on different machines. Workers run
in their own sessions and outlive the script that created them: the next run of the script
finds the job in `.monarch/job_state.pkl` and attaches to the same workers. A worker found
dead when the job is asked for its state again is started anew on its address (the host comes
back); a cached job with dead workers is replaced as a whole.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .._runtime._pids import pid_alive, proc_stat, start_time
from .._runtime._rundir import sweep_dead
from . import _allocation
from ._trait import JobState, JobTrait

START_TIMEOUT_S = 60.0
"""How long a worker may take to listen."""
KILL_GRACE_S = 5.0
"""How long `kill()` lets workers end their procs before it SIGKILLs them."""


@dataclasses.dataclass
class ProcessState:
    """One worker process: its pid (with start time, against pid reuse) and address."""

    pid: int
    channel: str
    start_time: str = ""
    ip: str = ""


class ProcessJob(JobTrait):
    """Hosts as local worker processes: multi-host behaviour on one machine.

        job = ProcessJob({"trainers": 2, "dataloaders": 1})
        state = job.state()      # workers started once; later runs attach to them
        state.trainers           # a HostMesh of 2 hosts
    """

    def __init__(self, meshes: dict[str, int], env: dict[str, str] | None = None) -> None:
        """
        Args:
            meshes: mesh name -> number of hosts.
            env: extra environment variables of the workers (and so of their procs).
        """
        if not meshes or any(not isinstance(n, int) or n < 1 for n in meshes.values()):
            raise ValueError(f"meshes must map names to positive host counts, got {meshes!r}")
        super().__init__()
        self._meshes = dict(meshes)
        self._env = dict(env) if env else None
        self._host_to_pid: dict[str, ProcessState] = {}
        self._dir: Path | None = None
        self._created = 0.0
        self._cwd = ""
        self._cache_stale = False

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _cache_stale=False)

    # -- the allocation --------------------------------------------------------------------
    def _create(self, client_script: str | None) -> None:
        if client_script is not None:
            raise RuntimeError("ProcessJob cannot run batch-mode scripts")
        self._dir = _allocation.new_allocation("process")
        self._created, self._cwd = time.time(), os.getcwd()
        _allocation.write_secret(self._dir / "secret")
        try:
            self._start(self._host_ips())
        except BaseException:
            self._kill()
            raise
        self._record()

    def _start(self, hosts: dict[str, str]) -> None:
        """Starts a worker per host key on its address; on a failure, none of them is left."""
        started: list[subprocess.Popen[bytes]] = []
        try:
            waiting = []
            for key, ip in hosts.items():
                child, ready = self._spawn(key, ip)
                started.append(child)
                waiting.append((key, child, ready))
            for key, child, ready in waiting:
                self._host_to_pid[key] = _wait_ready(child, ready)
        except BaseException:
            for child in started:
                child.kill()
                child.wait()
            raise

    def _host_ips(self) -> dict[str, str]:
        """Host key (`trainers_0`) -> its loopback address, in mesh order."""
        keys = [f"{mesh}_{i}" for mesh, count in self._meshes.items() for i in range(count)]
        first = ipaddress.ip_address("127.0.0.2")
        return {key: str(first + n) for n, key in enumerate(keys)}

    def _spawn(self, key: str, ip: str) -> tuple[subprocess.Popen[bytes], Path]:
        assert self._dir is not None
        ready = self._dir / f"{key}.ready"
        ready.unlink(missing_ok=True)
        env = dict(os.environ, **(self._env or {}),
                   MONARCH_WORKER_SECRET_FILE=str(self._dir / "secret"),
                   MONARCH_RUN_DIR=str(self._dir.parent.parent))  # where the allocation is
        env.pop("MONARCH_WORKER_SECRET", None)
        with open(self._dir / f"{key}.log", "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "monarch._host.worker", "--address", f"tcp://{ip}:0",
                 "--ready-file", str(ready), "--hostname", key],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        return child, ready

    def _state(self) -> JobState:
        from .._controller._remote import attach_to_workers

        if not self._host_to_pid:
            raise RuntimeError("this ProcessJob has no workers (killed, or never applied)")
        self._respawn_dead_hosts()
        secret = (self._require_dir() / "secret").read_text().strip().encode()
        hosts = {}
        for mesh, count in self._meshes.items():
            addresses = [self._host_to_pid[f"{mesh}_{i}"].channel for i in range(count)]
            hosts[mesh] = attach_to_workers(addresses, name=mesh, secret=secret)
        return JobState(hosts)

    def _respawn_dead_hosts(self) -> None:
        """Starts anew, on the same address, each worker that died (its host comes back)."""
        dead = [key for key, state in self._host_to_pid.items() if not _alive(state)]
        if not dead:
            return
        ips = self._host_ips()
        self._start({key: ips[key] for key in dead})
        self._cache_stale = True
        sweep_dead(self._require_dir().parent.parent)  # the dead workers' run directories
        self._record()

    def can_run(self, spec: JobTrait) -> bool:
        """True when `spec` asks for the same meshes and environment, and every worker of
        this job is alive."""
        return (isinstance(spec, ProcessJob) and spec._meshes == self._meshes
                and spec._env == self._env and self._pids_active())

    def _pids_active(self) -> bool:
        return (self.active and bool(self._host_to_pid)
                and all(_alive(state) for state in self._host_to_pid.values()))

    def _kill(self) -> None:
        states = [s for s in self._host_to_pid.values() if _alive(s)]
        # Every session below the workers (theirs, their zygotes', what procs started): what
        # a proc ran (`monarch exec 'sleep 1000'`) must not outlive the allocation.
        sessions = _sessions_below([s.pid for s in states])
        for state in states:
            _signal(state.pid, signal.SIGTERM)  # the worker ends its procs and zygotes
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(_alive(s) for s in states):
            time.sleep(0.05)
        for pid in _session_members(sessions):
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and _session_members(sessions):
            time.sleep(0.05)
        self._host_to_pid.clear()
        if self._dir is not None and self._dir.parent.parent.is_dir():
            sweep_dead(self._dir.parent.parent)  # the run root the workers used
        _allocation.remove(self._dir)
        self._dir = None

    # -- bookkeeping -----------------------------------------------------------------------
    @property
    def allocation_id(self) -> str | None:
        """The allocation's id (`monarch jobs`, `monarch kill --allocation ID`), once applied."""
        return self._dir.name if self._dir is not None else None

    def worker_addresses(self) -> list[str]:
        """The addresses of the allocation's host workers."""
        return [state.channel for state in self._host_to_pid.values()]

    @property
    def workers(self) -> dict[str, ProcessState]:
        """Each host's worker (pid, address), by host key (`trainers_0`)."""
        return dict(self._host_to_pid)

    def _require_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("this ProcessJob is not applied")
        return self._dir

    def _record(self) -> None:
        by_mesh = {mesh: [self._host_to_pid[f"{mesh}_{i}"].channel for i in range(count)]
                   for mesh, count in self._meshes.items()}
        _allocation.write_record(self._require_dir(), {
            "type": "ProcessJob", "meshes": self._meshes, "addresses": by_mesh,
            "workers": [{"host": key, "pid": s.pid, "start_time": s.start_time,
                         "address": s.channel} for key, s in self._host_to_pid.items()],
            "created": self._created, "cwd": self._cwd}, self)


def _alive(state: ProcessState) -> bool:
    return pid_alive(state.pid, state.start_time or None)


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process (from /proc)."""
    out = {}
    for entry in os.listdir("/proc"):
        fields = proc_stat(int(entry)) if entry.isdigit() else None
        if fields is not None:
            out[int(entry)] = (int(fields[1]), fields[0])
    return out


def _sessions_below(pids: list[int]) -> set[int]:
    """The session ids of `pids` and of all their descendants, except this process's own."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        try:
            found.add(os.getsid(pid))
        except OSError:
            pass
        todo.extend(children.get(pid, ()))
    return found - {os.getsid(0)}


def _session_members(sessions: set[int]) -> list[int]:
    """Live processes (zombies excluded) of these sessions."""
    members = []
    for pid, (_, state) in _processes().items():
        if state in ("Z", "X") or pid == os.getpid():
            continue
        try:
            if os.getsid(pid) in sessions:
                members.append(pid)
        except OSError:
            continue
    return members


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_ready(child: subprocess.Popen[bytes], ready: Path) -> ProcessState:
    """Waits until the worker wrote its ready file (it listens); its state."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.exists():
        if child.poll() is not None:
            log = ready.with_suffix(".log")
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"the worker for {ready.stem} exited with {child.returncode}:"
                               f"\n{tail}")
        if time.monotonic() > deadline:
            child.kill()
            raise TimeoutError(f"the worker for {ready.stem} did not listen within "
                               f"{START_TIMEOUT_S:.0f}s")
        time.sleep(0.02)
    info = json.loads(ready.read_text())
    ip = info["address"].removeprefix("tcp://").rsplit(":", 1)[0]
    return ProcessState(child.pid, info["address"], start_time(child.pid), ip)
