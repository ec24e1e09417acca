"""SlurmJob: host meshes from one Slurm allocation (`sbatch` + `srun` of host workers).

One batch job asks for the nodes of every mesh together; its `srun` tasks (one per node, or
`ntasks_per_node`, each on port `monarch_port + local task id`) run monarch host workers.
`state()` waits until the job runs, reads its node list (in Slurm's order: the first nodes go
to the first mesh) and attaches. Workers and controllers share a secret file (mode 0600) in
`log_dir`, which compute nodes must see. The job outlives the script: the next run finds it in
`.monarch/job_state.pkl` and attaches to the same workers while Slurm says it runs.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from . import _allocation
from ._trait import JobState, JobTrait

TERMINAL = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "COMPLETED", "NODE_FAIL",
                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "COMPLETING"})
"""Slurm job states after which the allocation is gone (COMPLETING: going, its workers ending:
a cancelled job stays there a while on a busy cluster, and is not worth attaching to)."""


class SlurmJob(JobTrait):
    """Host meshes allocated by Slurm.

        job = SlurmJob(meshes={"trainers": 2, "generators": 1})
        state = job.state()            # sbatch once; later runs attach to the same workers
        procs = state.trainers.spawn_procs(per_host={"gpus": 8})
    """

    def __init__(self, meshes: dict[str, int], python_exe: str = sys.executable,
                 slurm_args: Sequence[str] = (), monarch_port: int = 22222,
                 job_name: str = "monarch_job", ntasks_per_node: int = 1,
                 time_limit: str | None = None, partition: str | None = None,
                 log_dir: str | None = None, exclusive: bool = True,
                 gpus_per_node: int | None = None, cpus_per_task: int | None = None,
                 mem: str | None = None, job_start_timeout: int | None = None,
                 account: str | None = None, qos: str | None = None,
                 out_of_cluster: bool = False, attach_to: str | None = None,
                 bind_to: str | None = None) -> None:
        """
        Args:
            meshes: mesh name -> number of nodes.
            python_exe: the interpreter of the workers (this one by default).
            slurm_args: extra `#SBATCH` options, e.g. ("--constraint=h100",).
            monarch_port: tcp port of the workers (task `i` of a node: port + i).
            job_name: Slurm job name prefix.
            ntasks_per_node: workers per node; each is a host of the mesh.
            time_limit: HH:MM:SS, or Slurm's default.
            partition, account, qos: Slurm placement.
            log_dir: where worker logs and the worker secret go (default: the working
                directory); compute nodes must see it.
            exclusive: whole nodes (`--exclusive`); `share_node()` turns it off.
            gpus_per_node, cpus_per_task, mem: resources per node / task.
            job_start_timeout: seconds to wait for the allocation (None: forever).
            out_of_cluster, attach_to, bind_to: gateways for a controller outside the
                cluster network; not supported (the controller must reach the workers).
        """
        if not meshes or any(not isinstance(n, int) or n < 1 for n in meshes.values()):
            raise ValueError(f"meshes must map names to positive node counts, got {meshes!r}")
        if ntasks_per_node < 1:
            raise ValueError(f"ntasks_per_node must be positive, got {ntasks_per_node}")
        if out_of_cluster or attach_to is not None or bind_to is not None:
            raise NotImplementedError("out_of_cluster, attach_to and bind_to are not supported:"
                                      " the controller must reach the workers' addresses")
        super().__init__()
        self._meshes = dict(meshes)
        self._python_exe = python_exe
        self._slurm_args = tuple(slurm_args)
        self._port = monarch_port
        self._job_name = job_name
        self._ntasks_per_node = ntasks_per_node
        self._time_limit = time_limit
        self._partition = partition
        self._log_dir = str(Path(log_dir if log_dir is not None else os.getcwd()).absolute())
        self._exclusive = exclusive
        self._gpus_per_node = gpus_per_node
        self._cpus_per_task = cpus_per_task
        self._mem = mem
        self._job_start_timeout = job_start_timeout
        self._account = account
        self._qos = qos
        self._slurm_job_id: str | None = None
        self._all_hostnames: list[str] = []
        self._secret_file: str | None = None
        self._dir: Path | None = None
        self._created = 0.0

    def add_mesh(self, name: str, num_nodes: int) -> None:
        """Asks for one more mesh (before `apply()`)."""
        self._meshes[name] = num_nodes

    def share_node(self, tasks_per_node: int, gpus_per_task: int, partition: str) -> None:
        """Shares nodes with other jobs: not `--exclusive`, and this job's tasks ask for their
        share of a node of `partition` — `gpus_per_task` of its GPUs and as large a share of
        its CPUs and memory (without GPUs: `1 / tasks_per_node` of the node)."""
        if tasks_per_node < 1 or gpus_per_task < 0:
            raise ValueError("tasks_per_node must be positive and gpus_per_task not negative")
        cpus, mem_mb, gpus = _partition_node(partition)
        share = gpus_per_task / gpus if gpus and gpus_per_task else 1 / tasks_per_node
        if gpus_per_task > 0 and gpus_per_task * tasks_per_node > gpus:
            raise ValueError(f"{tasks_per_node} tasks of {gpus_per_task} GPUs do not fit a node "
                             f"of {partition} ({gpus} GPUs)")
        self._exclusive = False
        self._partition = partition
        self._ntasks_per_node = tasks_per_node
        self._cpus_per_task = max(1, int(cpus * share))
        self._mem = f"{max(1, int(mem_mb * share * tasks_per_node))}M"
        if gpus_per_task:
            self._gpus_per_node = gpus_per_task * tasks_per_node

    # -- the allocation --------------------------------------------------------------------
    def _create(self, client_script: str | None) -> None:
        if client_script is not None:
            raise NotImplementedError("SlurmJob batch mode (apply(client_script=...)) is not "
                                      "supported: apply() and run the client yourself")
        self._dir = _allocation.new_allocation("slurm")
        self._created = time.time()
        Path(self._log_dir).mkdir(parents=True, exist_ok=True)
        secret = Path(self._log_dir) / f".{self._job_name}-{secrets.token_hex(6)}.secret"
        self._secret_file = str(_allocation.write_secret(secret))
        try:
            self._slurm_job_id = self._submit()
        except BaseException:
            self._kill()
            raise
        self._record()

    def _script(self) -> str:
        nodes = sum(self._meshes.values())
        name = f"{self._job_name}_{os.getpid()}"
        out = Path(self._log_dir) / f"slurm_%j_{name}"
        lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --nodes={nodes}",
                 f"#SBATCH --ntasks-per-node={self._ntasks_per_node}", "#SBATCH --no-requeue",
                 f"#SBATCH --output={out}.out", f"#SBATCH --error={out}.err"]
        options = {"time": self._time_limit, "gpus-per-node": self._gpus_per_node,
                   "cpus-per-task": self._cpus_per_task, "mem": self._mem,
                   "partition": self._partition, "account": self._account, "qos": self._qos}
        lines += [f"#SBATCH --{k}={v}" for k, v in options.items() if v is not None]
        if self._exclusive:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {arg}" for arg in self._slurm_args if arg.startswith("-")]
        worker = (f"exec {shlex.quote(self._python_exe)} -m monarch._host.worker "
                  f"--port $(({self._port} + SLURM_LOCALID)) --hostname \"$SLURMD_NODENAME"
                  + ("/$SLURM_LOCALID" if self._ntasks_per_node > 1 else "") + '"')
        lines += [f"export MONARCH_WORKER_SECRET_FILE={shlex.quote(str(self._secret_file))}",
                  "unset MONARCH_WORKER_SECRET", f"srun bash -c {shlex.quote(worker)}"]
        return "\n".join(lines) + "\n"

    def _submit(self) -> str:
        out = subprocess.run(["sbatch"], input=self._script(), capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"Failed to submit SLURM job ({out.returncode}): "
                               f"{out.stderr.strip()}")
        for word in reversed(out.stdout.split()):
            if word.isdigit():
                return word
        raise RuntimeError(f"Failed to parse job ID from sbatch output: {out.stdout!r}")

    def _state(self) -> JobState:
        from .._controller._remote import attach_to_workers

        if self._slurm_job_id is None or self._secret_file is None:
            raise RuntimeError("this SlurmJob has no allocation (killed, or never applied)")
        if not self._all_hostnames:
            self._all_hostnames = self._wait_for_job_start()
            self._record()
        elif not self._jobs_active():
            raise RuntimeError(f"SLURM job {self._slurm_job_id} is no longer active")
        secret = Path(self._secret_file).read_text().strip().encode()
        hosts = {mesh: attach_to_workers(addresses, name=mesh, secret=secret)
                 for mesh, addresses in self._addresses().items()}
        return JobState(hosts)

    def _wait_for_job_start(self) -> list[str]:
        assert self._slurm_job_id is not None
        job_id, timeout = self._slurm_job_id, self._job_start_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %N"],
                                 capture_output=True, text=True)
            state, _, nodelist = out.stdout.strip().partition(" ")
            if state == "RUNNING" and nodelist:
                names = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                                       capture_output=True, text=True, check=True)
                return names.stdout.split()
            if not out.stdout.strip() or state in TERMINAL:
                raise RuntimeError(f"SLURM job {job_id} is not running (state {state or 'gone'})"
                                   f"; see the logs in {self._log_dir}")
            if deadline is not None and time.monotonic() > deadline:
                self._kill()
                raise TimeoutError(f"SLURM job {job_id} did not start within {timeout}s")
            time.sleep(0.25)

    def can_run(self, spec: JobTrait) -> bool:
        """True when `spec` is the same request and this job's allocation is queued or runs."""
        return (isinstance(spec, SlurmJob) and self._spec() == spec._spec()
                and self._jobs_active())

    def _spec(self) -> tuple[Any, ...]:
        return (self._meshes, self._python_exe, self._slurm_args, self._port, self._job_name,
                self._ntasks_per_node, self._time_limit, self._partition, self._exclusive,
                self._gpus_per_node, self._cpus_per_task, self._mem, self._account, self._qos)

    def _jobs_active(self) -> bool:
        if not self.active or self._slurm_job_id is None:
            return False
        state = _allocation.slurm_state(self._slurm_job_id)
        return state is not None and state not in TERMINAL

    def _kill(self) -> None:
        if self._slurm_job_id is not None:
            subprocess.run(["scancel", self._slurm_job_id], capture_output=True, check=False)
        self._slurm_job_id = None
        self._all_hostnames = []
        if self._secret_file is not None:
            Path(self._secret_file).unlink(missing_ok=True)
        self._secret_file = None
        _allocation.remove(self._dir)
        self._dir = None

    # -- bookkeeping -----------------------------------------------------------------------
    @property
    def allocation_id(self) -> str | None:
        """The allocation's id (`monarch jobs`, `monarch kill --allocation ID`), once applied."""
        return self._dir.name if self._dir is not None else None

    def worker_addresses(self) -> list[str]:
        """The addresses of the allocation's host workers (known once it ran)."""
        return [a for mesh in self._addresses().values() for a in mesh]

    def _addresses(self) -> dict[str, list[str]]:
        nodes, index, addresses = self._all_hostnames, 0, {}
        for mesh, count in self._meshes.items():
            addresses[mesh] = [f"tcp://{_resolve(n)}:{self._port + t}"
                               for n in nodes[index:index + count]
                               for t in range(self._ntasks_per_node)]
            index += count
        return addresses

    @property
    def slurm_job_id(self) -> str | None:
        """The Slurm job id of the allocation (None before `apply()`)."""
        return self._slurm_job_id

    @property
    def job_ids(self) -> dict[str, str]:
        """Slurm job id of each mesh (one allocation holds them all)."""
        job_id = self._slurm_job_id
        return {name: job_id for name in self._meshes} if job_id else {}

    def _record(self) -> None:
        if self._dir is None:
            return
        _allocation.write_record(self._dir, {
            "type": "SlurmJob", "meshes": self._meshes, "addresses": self._addresses(),
            "slurm_job_id": self._slurm_job_id, "nodes": self._all_hostnames,
            "created": self._created,
            "cwd": os.getcwd(), "log_dir": self._log_dir}, self)


def _resolve(node: str) -> str:
    try:
        return socket.gethostbyname(node)
    except OSError:
        return node


def _partition_node(partition: str) -> tuple[int, int, int]:
    """(CPUs, memory in MB, GPUs) of a node of `partition`, from `sinfo`."""
    out = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%c %m %G"],
                         capture_output=True, text=True)
    lines = out.stdout.split("\n") if out.returncode == 0 else []
    if not lines or not lines[0].strip():
        raise ValueError(f"no nodes in Slurm partition {partition!r}: {out.stderr.strip()}")
    cpus, mem, gres = (lines[0].split() + ["(null)"])[:3]
    gpus = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            gpus += int(parts[-1])
    return int(cpus.rstrip("+")), int(mem.rstrip("+")), gpus
