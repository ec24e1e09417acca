"""Jobs on a cluster scheduler: `SlurmJob` turns Slurm nodes into HostMeshes.

    job = SlurmJob(meshes={"trainers": 2})
    hosts = job.state().trainers             # a HostMesh with a `hosts` dimension of 2
    procs = hosts.spawn_procs(per_host={"gpus": 8})
    ...
    job.kill()

`apply()` submits one `sbatch` job per mesh whose tasks (`srun`, one per node) run a monarch host
worker; `state()` waits until they run, finds their nodes, and attaches this controller to
them. Workers and controller share a secret file (mode 0600) that the job creates. Losing a node
is a supervision event of every proc on it.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["JobState", "SlurmJob"]


class JobState:
    """The HostMesh of each mesh a job asked for, as attributes (`state.trainers`)."""

    def __init__(self, hosts: dict[str, Any]) -> None:
        self._hosts = hosts

    def __getattr__(self, name: str) -> Any:
        try:
            return self._hosts[name]
        except KeyError:
            available = ", ".join(sorted(self._hosts))
            raise AttributeError(f"'{name}' is not a valid host mesh name. Available names: "
                                 f"{available}") from None


class SlurmJob:
    """Host meshes allocated by Slurm (`sbatch` + `srun` of monarch host workers).

    Args:
        meshes: mesh name -> number of nodes.
        python_exe: the interpreter the workers run (this one by default).
        slurm_args: extra `#SBATCH` options, e.g. ("--exclusive",).
        monarch_port: tcp port of the first mesh's workers (the next mesh uses the next port).
        job_name: Slurm job name prefix.
        ntasks_per_node: workers per node (1: one worker spawns every proc of its node).
        time_limit: HH:MM:SS, or Slurm's default.
        partition, account, qos: Slurm placement.
        log_dir: where worker logs go (default ~/.monarch/slurm).
        exclusive: ask for whole nodes.
        gpus_per_node, cpus_per_task, mem: resources per node/task.
        job_start_timeout: seconds to wait for the allocation (None: forever).
    """

    def __init__(self, meshes: dict[str, int], python_exe: str = sys.executable,
                 slurm_args: Sequence[str] = (), monarch_port: int = 22222,
                 job_name: str = "monarch_job", ntasks_per_node: int = 1,
                 time_limit: str | None = None, partition: str | None = None,
                 log_dir: str | None = None, exclusive: bool = False,
                 gpus_per_node: int | None = None, cpus_per_task: int | None = None,
                 mem: str | None = None, job_start_timeout: int | None = None,
                 account: str | None = None, qos: str | None = None) -> None:
        if not meshes or any(not isinstance(n, int) or n < 1 for n in meshes.values()):
            raise ValueError(f"meshes must map names to positive node counts, got {meshes!r}")
        self._meshes = dict(meshes)
        self._python = python_exe
        self._slurm_args = list(slurm_args)
        self._port = monarch_port
        self._job_name = job_name
        self._ntasks = ntasks_per_node
        self._options = {"time": time_limit, "partition": partition, "account": account,
                         "qos": qos, "gpus-per-node": gpus_per_node,
                         "cpus-per-task": cpus_per_task, "mem": mem}
        self._exclusive = exclusive
        self._timeout = job_start_timeout
        self._log_dir = Path(log_dir or Path.home() / ".monarch" / "slurm")
        self._job_ids: dict[str, str] = {}
        self._secret_file: Path | None = None
        self._state: JobState | None = None

    def apply(self) -> None:
        """Submits the workers (once)."""
        if self._job_ids:
            return
        self._log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._secret_file = self._write_secret()
        for index, (name, nodes) in enumerate(self._meshes.items()):
            self._job_ids[name] = self._submit(name, nodes, self._port + index)

    def state(self) -> JobState:
        """Submits if needed, waits for every worker, attaches, and returns the host meshes."""
        if self._state is not None:
            return self._state
        self.apply()
        assert self._secret_file is not None
        os.environ["MONARCH_WORKER_SECRET_FILE"] = str(self._secret_file)
        from monarch.actor import attach_to_workers

        hosts = {}
        for index, (name, job_id) in enumerate(self._job_ids.items()):
            nodes = self._wait_running(job_id)
            port = self._port + index
            addresses = [f"tcp://{socket.gethostbyname(node)}:{port}" for node in nodes]
            hosts[name] = attach_to_workers(workers=addresses, name=name)
        self._state = JobState(hosts)
        return self._state

    def kill(self) -> None:
        """Cancels the Slurm jobs (their workers and every proc die with them)."""
        if self._job_ids:
            subprocess.run(["scancel", *self._job_ids.values()], check=False,
                           capture_output=True)
        self._job_ids = {}
        self._state = None
        if self._secret_file is not None:
            self._secret_file.unlink(missing_ok=True)

    @property
    def job_ids(self) -> dict[str, str]:
        """Slurm job id of each mesh."""
        return dict(self._job_ids)

    def _write_secret(self) -> Path:
        path = self._log_dir / f"{self._job_name}-{os.getpid()}-{secrets.token_hex(4)}.secret"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        return path

    def _submit(self, name: str, nodes: int, port: int) -> str:
        job = f"{self._job_name}_{name}_{os.getpid()}"
        lines = ["#!/bin/bash", f"#SBATCH --job-name={job}", f"#SBATCH --nodes={nodes}",
                 f"#SBATCH --ntasks-per-node={self._ntasks}", "#SBATCH --no-requeue",
                 f"#SBATCH --output={self._log_dir}/slurm_%j_{job}.out",
                 f"#SBATCH --error={self._log_dir}/slurm_%j_{job}.err"]
        lines += [f"#SBATCH --{k}={v}" for k, v in self._options.items() if v is not None]
        if self._exclusive:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {arg}" for arg in self._slurm_args if arg.startswith("-")]
        lines += [f"export MONARCH_WORKER_SECRET_FILE={self._secret_file}",
                  f"srun {self._python} -m monarch._host.worker --port {port}"]
        out = subprocess.run(["sbatch"], input="\n".join(lines) + "\n", capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch failed ({out.returncode}): {out.stderr.strip()}")
        for word in reversed(out.stdout.split()):
            if word.isdigit():
                return word
        raise RuntimeError(f"could not read the job id from sbatch's answer: {out.stdout!r}")

    def _wait_running(self, job_id: str) -> list[str]:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %N"],
                                 capture_output=True, text=True)
            state, _, nodelist = out.stdout.strip().partition(" ")
            if state == "RUNNING" and nodelist:
                names = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                                       capture_output=True, text=True, check=True)
                return names.stdout.split()
            if not out.stdout.strip() or state in ("FAILED", "CANCELLED", "TIMEOUT"):
                raise RuntimeError(f"Slurm job {job_id} is not running (state {state or 'gone'});"
                                   f" see the logs in {self._log_dir}")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"Slurm job {job_id} did not start within {self._timeout}s")
            time.sleep(0.25)
