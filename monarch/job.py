"""Jobs that outlive scripts: allocations of hosts as HostMeshes (Monarch's `monarch.job`).

    job = ProcessJob({"trainers": 4})            # or SlurmJob(meshes={"trainers": 4}), LocalJob()
    state = job.state()                          # allocate once; later runs reuse the workers
    procs = state.trainers.spawn_procs(per_host={"gpus": 8})
    ...
    job.kill()                                   # or `monarch kill --allocation`

`state()` saves the running job in `.monarch/job_state.pkl`; the next run of the script (or a
notebook kernel restarted) finds it there and, while its workers live and it `can_run` the
same spec, attaches to them in one round trip per worker instead of allocating. A dead or
different allocation is killed and replaced. A controller that goes away leaves the allocation
running (its procs there are ended); `monarch jobs` lists allocations, with or without a
client attached.
"""

from __future__ import annotations

from ._controller import _start as _jobstart  # noqa: F401 - a controller starts on first use
from ._jobs._allocation import allocation_rows as list_allocations
from ._jobs._bash import BashActor
from ._jobs._exec import exec_command
from ._jobs._port_forward import PortForwarder
from ._jobs._process import ProcessJob, ProcessState
from ._jobs._project import hosts_from_config, load_current_job, set_current_job
from ._jobs._slurm import SlurmJob
from ._jobs._telemetry import MeshAdminConfig, QueryEngineClient, TelemetryConfig
from ._jobs._trait import (
    DEFAULT_JOB_PATH, BatchJob, JobState, JobTrait, LocalJob, job_load, job_loads,
)

__all__ = [
    "BashActor",
    "BatchJob",
    "DEFAULT_JOB_PATH",
    "JobState",
    "JobTrait",
    "LocalJob",
    "MeshAdminConfig",
    "PortForwarder",
    "ProcessJob",
    "ProcessState",
    "QueryEngineClient",
    "SlurmJob",
    "TelemetryConfig",
    "exec_command",
    "hosts_from_config",
    "job_load",
    "job_loads",
    "list_allocations",
    "load_current_job",
    "set_current_job",
]
